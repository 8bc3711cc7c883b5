//! The measuring processes (`mem`, `w_http_client`): run with a time limit.

use std::process::Command;
use std::time::Duration;

use crate::mem::{Mode, Sample};

/// How long a measuring process (`mem`, `w_http_client`) may run before it is killed and its
/// figures reported as not measured: a hundred times a full-size run's (seconds), so that only
/// a hang reaches it.
pub const CHILD_LIMIT: Duration = Duration::from_secs(10 * 60);

/// Runs `command` to its end and returns its standard output; an error, with what it wrote to
/// standard error, if it cannot start, fails, or is still running after `limit` (it is then
/// killed: a hung child must not hang the report).
pub fn output_within(command: &mut Command, limit: Duration) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::process::Stdio;
    use wait_timeout::ChildExt;

    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    // Both pipes are drained while the child runs: one left full would block it.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                // A read error ends the output there; the exit status tells whether it matters.
                let _ = pipe.read_to_end(&mut bytes);
            }
            bytes
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let waited = child.wait_timeout(limit);
    let status = match waited {
        Ok(Some(status)) => Some(status),
        Ok(None) | Err(_) => {
            // Killing a child that has just exited fails harmlessly; the wait reaps it.
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default()).into_owned();
    match (status, waited) {
        (Some(status), _) if status.success() => Ok(stdout),
        (Some(status), _) => Err(format!("{program} failed ({status}): {stderr}")),
        (None, Ok(_)) => Err(format!(
            "{program} still running after {limit:?}, killed; it had written: {stderr}"
        )),
        (None, Err(e)) => Err(format!("{program}: waiting for it failed ({e}): {stderr}")),
    }
}

/// Runs the `mem` binary for `mode` over `pods`.
pub fn mem_sample(exe: &std::path::Path, mode: Mode, pods: usize) -> Result<Sample, String> {
    let out = output_within(
        Command::new(exe).args([mode.name(), &pods.to_string()]),
        CHILD_LIMIT,
    )
    .map_err(|e| format!("mem {}: {e}", mode.name()))?;
    let text = String::from_utf8_lossy(&out);
    text.lines()
        .rev()
        .find_map(Sample::from_json)
        .ok_or_else(|| format!("mem {}: no result in {text:?}", mode.name()))
}
