//! What the metrics tests share: reading a sample, checking the text format.
#![allow(dead_code)]

/// `name{labels} value` for a sample of the scrape, if present.
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Checks the OpenMetrics text format: families announced by `# TYPE` (and `# HELP`), samples
/// of the announced family only (with its suffixes), label values quoted, numbers parsing, one
/// `# EOF` at the very end.
pub(crate) fn assert_openmetrics(text: &str) {
    assert!(text.ends_with("# EOF\n"), "ends with # EOF");
    let mut family: Option<(String, String)> = None;
    for line in text.lines() {
        if line == "# EOF" {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name type");
            assert!(
                [
                    "counter",
                    "gauge",
                    "histogram",
                    "info",
                    "stateset",
                    "unknown",
                    "summary"
                ]
                .contains(&kind),
                "{line}"
            );
            family = Some((name.to_owned(), kind.to_owned()));
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with("# UNIT ") {
            continue;
        }
        let (name, kind) = family.as_ref().expect("a sample after a # TYPE");
        let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
        let value = value.trim();
        assert!(
            value.parse::<f64>().is_ok() || ["+Inf", "-Inf", "NaN"].contains(&value),
            "{line}"
        );
        let metric = series.split('{').next().expect("a name");
        let allowed: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_sum", "_count", "_created"],
            _ => &[""],
        };
        assert!(
            allowed
                .iter()
                .any(|suffix| metric == format!("{name}{suffix}")),
            "{metric} under family {name} ({kind})"
        );
        if let Some(labels) = series.split_once('{').map(|(_, l)| l) {
            let labels = labels.strip_suffix('}').expect("labels close");
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (key, value) = pair.split_once('=').expect("key=value");
                assert!(!key.is_empty() && value.starts_with('"'), "{line}");
            }
        }
    }
}
