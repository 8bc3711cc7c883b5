//! SYNC-WIRE: SYNC's list-and-sync (see [`crate::sync`]) over each [`Transport`]: HTTP/1.1
//! as kube-client sends it by default, HTTP/1.1 asking for gzip, and HTTP/2 with prior
//! knowledge; from the simulator on loopback without a limit, and behind a 100 MB/s link.
//! What compression and HTTP/2 buy, and where.

use super::figures::Row;
use super::sync::{figures, samples, side_label, what, with_servers};
use super::{Options, Rows};
use crate::sync::{Mode, Side, Synced, Transport};

/// The limited link: 100 MB/s (800 Mbit/s), the server's every response together.
const LIMITED: u64 = 100_000_000;

/// The sides measured over every transport: ours by default (protobuf) and reading JSON.
const SIDES: [Side; 2] = [Side::Ours, Side::OursJson];

/// SYNC-WIRE rows: for each shape, link, mode and side, gzip and h2c against plain HTTP/1.1.
pub(super) fn sync_wire_rows(opts: &Options, out: &mut Rows<'_>) {
    with_servers(opts, "SYNC-WIRE", |server, client_exe, shape, n| {
        for link in [None, Some(LIMITED)] {
            if let Err(e) = server.set_bandwidth(link) {
                eprintln!("SYNC-WIRE: the bandwidth was not set: {e}");
                continue;
            }
            for mode in [Mode::List, Mode::Streaming] {
                for side in SIDES {
                    let samples = samples(
                        opts,
                        client_exe,
                        &server.url,
                        &Transport::ALL,
                        |transport| [side.name(), mode.name(), transport.name()],
                    );
                    let what = format!("{}, {}", what(shape, n, mode), link_label(link));
                    emit(out, &what, side, &samples);
                }
            }
        }
    });
}

/// The rows of one shape, link, mode and side: each transport against plain HTTP/1.1.
fn emit(out: &mut Rows<'_>, what: &str, side: Side, samples: &[(Transport, Vec<Synced>)]) {
    let figures = |transport: Transport| figures(samples, transport);
    let (plain_time, plain_rss) = figures(Transport::Plain);
    for transport in [Transport::Gzip, Transport::H2c] {
        let (time, rss) = figures(transport);
        let label = format!(
            "{}, {}; right-hand column: plain HTTP/1.1",
            side_label(side),
            transport_label(transport)
        );
        out.emit(Row::new(
            "SYNC-WIRE",
            format!("{what}: time to synced, {label}"),
            time,
            plain_time,
        ));
        out.emit(Row::new(
            "SYNC-WIRE",
            format!("{what}: RSS grown by the sync, {label}"),
            rss,
            plain_rss,
        ));
    }
}

fn link_label(link: Option<u64>) -> String {
    match link {
        None => "loopback, no limit".to_owned(),
        Some(rate) => format!("a {} MB/s link", rate / 1_000_000),
    }
}

fn transport_label(transport: Transport) -> &'static str {
    match transport {
        Transport::Plain => "plain HTTP/1.1",
        Transport::Gzip => "HTTP/1.1 asking for gzip",
        Transport::H2c => "HTTP/2 (h2c)",
    }
}
