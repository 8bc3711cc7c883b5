//! The byte scanner under the list decoder: where a JSON value ends, found as its bytes arrive
//! (strings, escapes and nesting tracked), without decoding it.

use memchr::memchr2;

/// Scans one JSON value's bytes, across as many chunks as it takes, until it finds where the
/// value ends. It does not validate: `serde_json` decodes the value's bytes once they are in.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ValueScan {
    /// Nesting of the value being scanned.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The value being scanned is a string or a scalar (not an object or array).
    scalar: Option<u8>,
}

impl ValueScan {
    /// Starts scanning a value whose first byte is `first`.
    pub(super) fn begin(first: u8) -> Self {
        Self {
            scalar: match first {
                b'{' | b'[' => None,
                other => Some(other),
            },
            ..Self::default()
        }
    }

    /// Scans on in the value, in `buf` from `pos` (how far the value has been scanned, moved
    /// on to what has been now); where it ends, once it has.
    pub(super) fn end(&mut self, buf: &[u8], pos: &mut usize) -> Option<usize> {
        match self.scalar {
            Some(b'"') => self.string_end(buf, pos),
            Some(_) => self.scalar_end(buf, pos),
            None => self.nested_end(buf, pos),
        }
    }

    /// A string: from its opening quote to its closing one.
    fn string_end(&mut self, buf: &[u8], pos: &mut usize) -> Option<usize> {
        if !self.in_string {
            self.in_string = true;
            *pos += 1;
        }
        if self.skip_string(buf, pos) {
            self.scalar = None;
            Some(*pos)
        } else {
            None
        }
    }

    /// A number, true, false or null: up to the next delimiter.
    fn scalar_end(&mut self, buf: &[u8], pos: &mut usize) -> Option<usize> {
        while *pos < buf.len() {
            let b = buf[*pos];
            if b == b',' || b == b'}' || b == b']' || b.is_ascii_whitespace() {
                self.scalar = None;
                return Some(*pos);
            }
            *pos += 1;
        }
        None
    }

    /// An object or an array: up to the bracket that closes it, strings skipped.
    fn nested_end(&mut self, buf: &[u8], pos: &mut usize) -> Option<usize> {
        loop {
            if self.in_string && !self.skip_string(buf, pos) {
                return None;
            }
            let &b = buf.get(*pos)?;
            *pos += 1;
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth -= 1;
                    if self.depth == 0 {
                        return Some(*pos);
                    }
                }
                _ => {}
            }
        }
    }

    /// Skips on to the end of the string being scanned (`in_string`, after its opening quote):
    /// whether it ended in `buf` (then `pos` is after its closing quote).
    fn skip_string(&mut self, buf: &[u8], pos: &mut usize) -> bool {
        loop {
            if self.escaped {
                if *pos >= buf.len() {
                    return false;
                }
                *pos += 1;
                self.escaped = false;
            }
            match memchr2(b'"', b'\\', &buf[*pos..]) {
                None => {
                    *pos = buf.len();
                    return false;
                }
                Some(n) => {
                    *pos += n + 1;
                    if buf[*pos - 1] == b'"' {
                        self.in_string = false;
                        return true;
                    }
                    self.escaped = true;
                }
            }
        }
    }
}
