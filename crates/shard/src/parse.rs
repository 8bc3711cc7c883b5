//! The `shardSelector` grammar: the part of CEL kube-apiserver v1.36 accepts there.
//!
//! ```text
//! selector := term ( "||" term )*
//! term     := "(" selector ")" | call
//! call     := "shardRange" "(" path "," literal "," literal ")"
//! path     := "object.metadata.uid" | "object.metadata.namespace"   (CEL select chain)
//! literal  := '0x' 16 lower-case hex digits, or '0x10000000000000000'   (single or double quotes)
//! ```
//!
//! Whitespace (space, tab, newline, carriage return, form feed) may stand between any two tokens.

use crate::range::HASH_SPACE_END;
use crate::{Bound, ParseError, ShardField, ShardRange, ShardSelector};

/// A token and what it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Ident(&'a str),
    /// A string literal's contents, without the quotes.
    Str(&'a str),
    Number(&'a str),
    Dot,
    Comma,
    Open,
    Close,
    Or,
    /// Any other operator or character (`&&`, `==`, `[`, ...): never valid here.
    Other(&'a str),
    End,
}

impl Tok<'_> {
    fn describe(self) -> String {
        match self {
            Tok::Ident(s) | Tok::Number(s) | Tok::Other(s) => format!("`{s}`"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Dot => "`.`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Open => "`(`".into(),
            Tok::Close => "`)`".into(),
            Tok::Or => "`||`".into(),
            Tok::End => "the end".into(),
        }
    }
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0c')
}

/// The end of the run of bytes from `from` that `keep` accepts.
fn scan(bytes: &[u8], from: usize, keep: impl Fn(u8) -> bool) -> usize {
    from + bytes[from..].iter().take_while(|b| keep(**b)).count()
}

/// The tokens of `input` with their byte offsets, ending with [`Tok::End`].
fn lex(input: &str) -> Result<Vec<(usize, Tok<'_>)>, ParseError> {
    let bytes = input.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let tok = match bytes[i] {
            b if is_space(char::from(b)) => {
                i += 1;
                continue;
            }
            b'.' | b',' | b'(' | b')' => {
                i += 1;
                match bytes[start] {
                    b'.' => Tok::Dot,
                    b',' => Tok::Comma,
                    b'(' => Tok::Open,
                    _ => Tok::Close,
                }
            }
            b'|' if bytes.get(i + 1) == Some(&b'|') => {
                i += 2;
                Tok::Or
            }
            b'\'' | b'"' => {
                let (tok, next) = string(input, i)?;
                i = next;
                tok
            }
            b if b.is_ascii_alphabetic() || b == b'_' => {
                i = scan(bytes, i, |b| b.is_ascii_alphanumeric() || b == b'_');
                Tok::Ident(&input[start..i])
            }
            b if b.is_ascii_digit() => {
                i = scan(bytes, i, |b| b.is_ascii_alphanumeric() || b == b'.');
                Tok::Number(&input[start..i])
            }
            _ => {
                let one = input[i..].chars().next().map_or(1, char::len_utf8);
                let operator = scan(bytes, i, |b| b"&|=!<>+-*/%?:".contains(&b));
                i = operator.max(i + one);
                Tok::Other(&input[start..i])
            }
        };
        out.push((start, tok));
    }
    out.push((bytes.len(), Tok::End));
    Ok(out)
}

/// The string literal whose opening quote is at `open`, and the offset after it.
fn string(input: &str, open: usize) -> Result<(Tok<'_>, usize), ParseError> {
    let bytes = input.as_bytes();
    let quote = bytes[open];
    let body = open + 1;
    for (k, &b) in bytes[body..].iter().enumerate() {
        match b {
            b'\\' => return Err(ParseError::Escape { position: open }),
            b'\n' | b'\r' => break,
            b if b == quote => return Ok((Tok::Str(&input[body..body + k]), body + k + 1)),
            _ => {}
        }
    }
    Err(ParseError::UnterminatedString { position: open })
}

/// A call's argument, as far as the checks need to know it.
enum Arg<'a> {
    Path(String),
    Str(&'a str),
    /// A number, a nested call.
    Other,
}

/// A function call of the expression.
struct Call<'a> {
    name: &'a str,
    args: Vec<Arg<'a>>,
}

struct Parser<'a> {
    toks: Vec<(usize, Tok<'a>)>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Tok<'a> {
        self.toks[self.at].1
    }

    /// The next token, consumed (the end stays).
    fn bump(&mut self) -> (usize, Tok<'a>) {
        let tok = self.toks[self.at];
        if tok.1 != Tok::End {
            self.at += 1;
        }
        tok
    }

    fn unexpected(&self, expected: &'static str) -> ParseError {
        let (position, tok) = self.toks[self.at];
        ParseError::Unexpected {
            position,
            found: tok.describe(),
            expected,
        }
    }

    /// `term ( "||" term )*`, each call appended to `calls`.
    fn selector(&mut self, calls: &mut Vec<Call<'a>>) -> Result<(), ParseError> {
        self.term(calls)?;
        while self.peek() == Tok::Or {
            self.bump();
            self.term(calls)?;
        }
        Ok(())
    }

    /// `"(" selector ")"` or a call.
    fn term(&mut self, calls: &mut Vec<Call<'a>>) -> Result<(), ParseError> {
        match self.peek() {
            Tok::Open => {
                self.bump();
                self.selector(calls)?;
                if self.peek() != Tok::Close {
                    return Err(self.unexpected("`)` or `||`"));
                }
                self.bump();
                Ok(())
            }
            Tok::Ident(name) => {
                self.bump();
                if self.peek() != Tok::Open {
                    return Err(self.unexpected("`(` after the function name"));
                }
                self.bump();
                let args = self.args()?;
                calls.push(Call { name, args });
                Ok(())
            }
            _ => Err(self.unexpected("shardRange(...) or `(`")),
        }
    }

    /// A call's arguments, after its `(`, through its `)`.
    fn args(&mut self) -> Result<Vec<Arg<'a>>, ParseError> {
        let mut args = Vec::new();
        if self.peek() == Tok::Close {
            self.bump();
            return Ok(args);
        }
        loop {
            args.push(self.arg()?);
            match self.peek() {
                Tok::Comma => {
                    self.bump();
                }
                Tok::Close => {
                    self.bump();
                    return Ok(args);
                }
                _ => return Err(self.unexpected("`,` or `)`")),
            }
        }
    }

    /// A string literal, a number, a field path or a nested call.
    fn arg(&mut self) -> Result<Arg<'a>, ParseError> {
        match self.peek() {
            Tok::Str(s) => {
                self.bump();
                Ok(Arg::Str(s))
            }
            Tok::Number(_) => {
                self.bump();
                Ok(Arg::Other)
            }
            Tok::Ident(first) => {
                self.bump();
                if self.peek() == Tok::Open {
                    self.bump();
                    self.args()?;
                    return Ok(Arg::Other);
                }
                let mut path = first.to_owned();
                while self.peek() == Tok::Dot {
                    self.bump();
                    let Tok::Ident(next) = self.peek() else {
                        return Err(self.unexpected("a field name after `.`"));
                    };
                    self.bump();
                    path.push('.');
                    path.push_str(next);
                }
                Ok(Arg::Path(path))
            }
            _ => Err(self.unexpected("an argument")),
        }
    }
}

/// Parses a `shardSelector` (see the module docs); errors as kube-apiserver finds them.
pub(crate) fn parse(input: &str) -> Result<ShardSelector, ParseError> {
    if input.trim_matches(is_space).is_empty() {
        return Err(ParseError::Blank);
    }
    let mut parser = Parser {
        toks: lex(input)?,
        at: 0,
    };
    let mut calls = Vec::new();
    parser.selector(&mut calls)?;
    if parser.peek() != Tok::End {
        return Err(parser.unexpected("`||` or the end"));
    }
    let requirements = calls
        .into_iter()
        .map(requirement)
        .collect::<Result<Vec<_>, _>>()?;
    let first = requirements[0].0;
    if let Some(&(other, _)) = requirements.iter().find(|(f, _)| *f != first) {
        return Err(ParseError::MixedFields { first, other });
    }
    Ok(ShardSelector::from_parts(
        first,
        requirements.into_iter().map(|(_, r)| r).collect(),
    ))
}

/// One `shardRange(field, start, end)`, checked.
fn requirement(call: Call<'_>) -> Result<(ShardField, ShardRange), ParseError> {
    if call.name != "shardRange" {
        return Err(ParseError::UnsupportedFunction {
            name: call.name.to_owned(),
        });
    }
    let [field, start, end] = <[Arg<'_>; 3]>::try_from(call.args)
        .map_err(|args| ParseError::ArgumentCount { count: args.len() })?;
    let field = match field {
        Arg::Path(path) => {
            ShardField::from_path(&path).ok_or(ParseError::UnsupportedField { path })?
        }
        _ => return Err(ParseError::NotAFieldPath),
    };
    let start = literal(start, Bound::Start)?;
    let end = literal(end, Bound::End)?;
    let (low, high) = (bound(start, Bound::Start)?, bound(end, Bound::End)?);
    let range = u64::try_from(low)
        .ok()
        .and_then(|low| ShardRange::new(low, high).ok())
        .ok_or_else(|| ParseError::EmptyRange {
            start: start.to_owned(),
            end: end.to_owned(),
        })?;
    Ok((field, range))
}

fn literal(arg: Arg<'_>, bound: Bound) -> Result<&str, ParseError> {
    match arg {
        Arg::Str(s) => Ok(s),
        _ => Err(ParseError::NotAString { bound }),
    }
}

/// The value of a bound's literal: `0x` and 16 lower-case hex digits, or 2^64.
fn bound(literal: &str, bound: Bound) -> Result<u128, ParseError> {
    let owned = || literal.to_owned();
    let Some(digits) = literal.strip_prefix("0x") else {
        return Err(ParseError::MissingPrefix {
            bound,
            literal: owned(),
        });
    };
    if digits.is_empty() {
        return Err(ParseError::NoDigits { bound });
    }
    if let Some(ch) = digits.chars().find(|c| !matches!(c, '0'..='9' | 'a'..='f')) {
        return Err(ParseError::NotHex {
            bound,
            literal: owned(),
            ch,
        });
    }
    match digits.len() {
        16 => Ok(digits.bytes().fold(0, |value, b| value * 16 + hex_digit(b))),
        17 if digits == "10000000000000000" => Ok(HASH_SPACE_END),
        17 => Err(ParseError::BeyondHashSpace {
            bound,
            literal: owned(),
        }),
        n => Err(ParseError::DigitCount {
            bound,
            literal: owned(),
            suggestion: (n < 16).then(|| format!("0x{digits:0>16}")),
        }),
    }
}

/// The value of a hex digit (0 for anything else, which the checks above exclude).
fn hex_digit(b: u8) -> u128 {
    u128::from(char::from(b).to_digit(16).unwrap_or(0))
}
