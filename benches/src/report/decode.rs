//! DECODE: each parser on the same documents, and the adapter's decoders against kube-client's.

use super::figures::{Figure, Row, median};
use super::{Options, Rows};

/// DECODE: each parser on the same documents, medians of runs taken in turns.
pub(super) fn decode_rows(opts: &Options, out: &mut Rows<'_>) {
    use crate::decode::{
        BODY_CHUNK, Parser, Path, list_body, per_doc, per_list_item, per_watch_line, protobuf,
        realistic, synthetic, watch_lines,
    };
    let n = if opts.sizes.listed < 50_000 {
        200
    } else {
        2_000
    };
    for (what, docs) in [
        ("synthetic pod", synthetic(n)),
        ("realistic pod", realistic(n / 4)),
    ] {
        let bytes = docs.iter().map(Vec::len).sum::<usize>() / docs.len();
        let pb_docs = protobuf(&docs);
        let pb_bytes = pb_docs.iter().map(Vec::len).sum::<usize>() / docs.len();
        let docs_of = |parser: Parser| {
            if parser.reads_protobuf() {
                &pb_docs
            } else {
                &docs
            }
        };
        let mut runs: Vec<Vec<f64>> = vec![Vec::new(); Parser::ALL.len()];
        for _ in 0..opts.reps.max(1) {
            for (p, parser) in Parser::ALL.into_iter().enumerate() {
                runs[p].push(per_doc(parser, docs_of(parser)).as_nanos() as f64);
            }
        }
        for (parser, times) in Parser::ALL.into_iter().zip(runs) {
            let size = if parser.reads_protobuf() {
                format!("{pb_bytes} B of protobuf")
            } else {
                format!("{bytes} B of JSON")
            };
            let row = Row::new(
                "DECODE",
                format!("{what} ({size}): {}", parser.name()),
                Figure::Ns(median(times)),
                Figure::NotApplicable,
            );
            out.emit(row.rate_per_op());
        }
        // The same pods as a list page and as watch lines, through the adapter's decoders and
        // kube-client's, side by side.
        let body = list_body(&docs);
        let lines = watch_lines(&docs);
        let (mut list, mut watch) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
        for _ in 0..opts.reps.max(1) {
            for (i, path) in [Path::Ours, Path::KubeClient].into_iter().enumerate() {
                list[i].push(per_list_item(path, &body, docs.len(), 3).as_nanos() as f64);
                watch[i].push(per_watch_line(path, &lines).as_nanos() as f64);
            }
        }
        let pods = docs.len();
        for (phase, [ours, peer]) in [
            (
                format!("{what}: list item (a page of {pods}, in {BODY_CHUNK} B pieces)"),
                list,
            ),
            (format!("{what}: watch line (MODIFIED)"), watch),
        ] {
            let row = Row::new(
                "DECODE",
                format!("{phase}: the adapter (ours) vs kube-client"),
                Figure::Ns(median(ours)),
                Figure::Ns(median(peer)),
            );
            out.emit(row.rate_per_op());
        }
    }
}
