//! Label and field selectors: parsing (with the errors kube-apiserver reports as 400) and
//! matching against stored JSON objects.
//!
//! Hand-written because no maintained crate parses Kubernetes selector strings on the server
//! side; the grammar is small (`k8s.io/apimachinery/pkg/labels` and `.../fields`).

use serde_json::Value;

use crate::resource::ResourceInfo;

/// A parsed label selector: all requirements must hold (comma means AND).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelOp {
    Exists,
    DoesNotExist,
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    GreaterThan(i64),
    LessThan(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Ident(String),
    Comma,
    Open,
    Close,
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(s) => s.clone(),
            Token::Comma => ",".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Bang => "!".into(),
            Token::Eq => "=".into(),
            Token::DoubleEq => "==".into(),
            Token::NotEq => "!=".into(),
            Token::Gt => ">".into(),
            Token::Lt => "<".into(),
        }
    }
}

fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {}
            ',' => tokens.push(Token::Comma),
            '(' => tokens.push(Token::Open),
            ')' => tokens.push(Token::Close),
            '>' => tokens.push(Token::Gt),
            '<' => tokens.push(Token::Lt),
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                tokens.push(Token::NotEq);
            }
            '!' => tokens.push(Token::Bang),
            '=' if chars.peek() == Some(&'=') => {
                chars.next();
                tokens.push(Token::DoubleEq);
            }
            '=' => tokens.push(Token::Eq),
            _ => {
                let mut ident = String::from(c);
                while let Some(&n) = chars.peek() {
                    if matches!(
                        n,
                        ' ' | '\t' | '\n' | '\r' | ',' | '(' | ')' | '>' | '<' | '!' | '='
                    ) {
                        break;
                    }
                    ident.push(n);
                    chars.next();
                }
                tokens.push(Token::Ident(ident));
            }
        }
    }
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn found(t: Option<&Token>) -> String {
        t.map_or_else(|| "end of string".to_owned(), Token::describe)
    }

    fn requirement(&mut self) -> Result<LabelRequirement, String> {
        let negated = if self.peek() == Some(&Token::Bang) {
            self.pos += 1;
            true
        } else {
            false
        };
        let key = match self.next() {
            Some(Token::Ident(k)) => k,
            other => {
                return Err(format!(
                    "found '{}', expected: !, identifier, or 'end of string'",
                    Self::found(other.as_ref())
                ));
            }
        };
        validate_label_key(&key)?;
        if negated {
            return Ok(LabelRequirement {
                key,
                op: LabelOp::DoesNotExist,
            });
        }
        let op = match self.peek() {
            None | Some(Token::Comma) => {
                return Ok(LabelRequirement {
                    key,
                    op: LabelOp::Exists,
                });
            }
            Some(Token::Eq | Token::DoubleEq) => {
                self.pos += 1;
                LabelOp::Equals(self.single_value()?)
            }
            Some(Token::NotEq) => {
                self.pos += 1;
                LabelOp::NotEquals(self.single_value()?)
            }
            Some(Token::Gt | Token::Lt) => {
                let greater = self.next() == Some(Token::Gt);
                let raw = self.single_value()?;
                let n: i64 = raw.parse().map_err(|_| {
                    format!("for 'Gt', 'Lt' operators, the value must be an integer: {raw:?}")
                })?;
                if greater {
                    LabelOp::GreaterThan(n)
                } else {
                    LabelOp::LessThan(n)
                }
            }
            Some(Token::Ident(word)) if word == "in" || word == "notin" => {
                let is_in = word == "in";
                self.pos += 1;
                let values = self.value_set()?;
                if is_in {
                    LabelOp::In(values)
                } else {
                    LabelOp::NotIn(values)
                }
            }
            other => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    Self::found(other)
                ));
            }
        };
        Ok(LabelRequirement { key, op })
    }

    fn single_value(&mut self) -> Result<String, String> {
        let value = match self.peek() {
            Some(Token::Ident(v)) => {
                let v = v.clone();
                self.pos += 1;
                v
            }
            None | Some(Token::Comma) => String::new(),
            other => {
                return Err(format!(
                    "found '{}', expected: identifier",
                    Self::found(other)
                ));
            }
        };
        validate_label_value(&value)?;
        Ok(value)
    }

    /// A parenthesised value set, with kube-apiserver's rules for empty values: `()` is the
    /// set `{""}`, and a comma with nothing before it (`(,a)`), after it (`(a,)`) or next to
    /// another (`(,,a)`) stands for `""`.
    fn value_set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Token::Open) => {}
            other => {
                return Err(format!(
                    "found '{}', expected: '('",
                    Self::found(other.as_ref())
                ));
            }
        }
        let mut values = Vec::new();
        match self.peek() {
            Some(Token::Close) => {
                self.pos += 1;
                return Ok(vec![String::new()]);
            }
            Some(Token::Ident(_) | Token::Comma) => {}
            other => {
                return Err(format!(
                    "found '{}', expected: ',', ')' or identifier",
                    Self::found(other)
                ));
            }
        }
        loop {
            match self.next() {
                Some(Token::Ident(v)) => {
                    validate_label_value(&v)?;
                    values.push(v);
                    match self.peek() {
                        Some(Token::Comma) => {}
                        Some(Token::Close) => break,
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or ')'",
                                Self::found(other)
                            ));
                        }
                    }
                }
                Some(Token::Comma) => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    match self.peek() {
                        Some(Token::Close) => {
                            values.push(String::new());
                            break;
                        }
                        Some(Token::Comma) => {
                            self.pos += 1;
                            values.push(String::new());
                        }
                        _ => {}
                    }
                }
                other => {
                    return Err(format!(
                        "found '{}', expected: ',' or identifier",
                        Self::found(other.as_ref())
                    ));
                }
            }
        }
        // The closing parenthesis, seen above.
        self.pos += 1;
        Ok(values)
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

fn validate_name_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 63
        && part.chars().all(is_name_char)
        && part.starts_with(|c: char| c.is_ascii_alphanumeric())
        && part.ends_with(|c: char| c.is_ascii_alphanumeric())
}

fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            })
    });
    if prefix_ok && validate_name_part(name) {
        Ok(())
    } else {
        Err(format!(
            "unable to parse requirement: Invalid value: {key:?}: name part must consist of \
             alphanumeric characters, '-', '_' or '.', and must start and end with an \
             alphanumeric character"
        ))
    }
}

fn validate_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || validate_name_part(value) {
        Ok(())
    } else {
        Err(format!(
            "unable to parse requirement: Invalid value: {value:?}: a valid label must be an \
             empty string or consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character"
        ))
    }
}

impl LabelSelector {
    /// Parses a `labelSelector` query value. The error text is what the server puts in the 400
    /// Status message.
    pub fn parse(input: &str) -> Result<Self, String> {
        let mut parser = Parser {
            tokens: lex(input),
            pos: 0,
        };
        let mut requirements = Vec::new();
        while parser.peek().is_some() {
            requirements.push(parser.requirement()?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {
                    if parser.peek().is_none() {
                        return Err("found 'end of string', expected: !, identifier".to_owned());
                    }
                }
                Some(other) => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        other.describe()
                    ));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `object`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        let labels = object.pointer("/metadata/labels");
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|r| {
            let value = get(&r.key);
            match &r.op {
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::Equals(v) => value == Some(v.as_str()),
                LabelOp::NotEquals(v) => value != Some(v.as_str()),
                LabelOp::In(set) => value.is_some_and(|x| set.iter().any(|s| s == x)),
                LabelOp::NotIn(set) => value.is_none_or(|x| !set.iter().any(|s| s == x)),
                LabelOp::GreaterThan(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                LabelOp::LessThan(n) => value
                    .and_then(|x| x.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma-AND.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FieldTerm {
    path: Vec<String>,
    label: String,
    value: String,
    equal: bool,
}

/// Splits on an unescaped separator, keeping escapes in place.
fn split_unescaped(input: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            current.push(c);
            if let Some(n) = chars.next() {
                current.push(n);
            }
        } else if c == sep {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
}

fn unescape(input: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = input.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | ',' | '=')) => out.push(n),
                Some(n) => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{n}"
                    ));
                }
                None => return Err("invalid field selector: unterminated escape sequence".into()),
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// Finds the first unescaped operator in a term: `!=`, `==` or `=`.
fn split_operator(term: &str) -> Option<(&str, &str, bool)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], &term[i + 2..], false));
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], &term[i + 2..], true));
            }
            b'=' => return Some((&term[..i], &term[i + 1..], true)),
            _ => i += 1,
        }
    }
    None
}

impl FieldSelector {
    /// Parses a `fieldSelector` query value for `resource`. Errors are the 400 messages:
    /// a term without an operator, or a field the type does not support.
    pub fn parse(input: &str, resource: &ResourceInfo) -> Result<Self, String> {
        let mut terms = Vec::new();
        if input.trim().is_empty() {
            return Ok(FieldSelector { terms });
        }
        for raw in split_unescaped(input, ',') {
            let Some((label, value, equal)) = split_operator(&raw) else {
                return Err(format!(
                    "invalid selector: '{input}'; can't understand '{raw}'"
                ));
            };
            let label = unescape(label.trim())?;
            let value = unescape(value)?;
            let supported = label == "metadata.name"
                || (label == "metadata.namespace" && resource.namespaced)
                || resource.selectable_fields.contains(&label);
            if !supported {
                return Err(format!("field label not supported: {label}"));
            }
            terms.push(FieldTerm {
                path: label.split('.').map(str::to_owned).collect(),
                label,
                value,
                equal,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The value a `metadata.name=<x>` term requires, if any.
    pub fn required_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.label == "metadata.name")
            .map(|t| t.value.as_str())
    }

    /// Whether `object` satisfies every term. A missing field compares as `""`.
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|t| {
            let mut cursor = Some(object);
            for segment in &t.path {
                cursor = cursor.and_then(|c| c.get(segment));
            }
            let actual = match cursor {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            (actual == t.value) == t.equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labeled(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "labels": labels}})
    }

    #[test]
    fn every_label_operator_matches_like_kubernetes() {
        let obj = labeled(json!({"app": "web", "tier": "fe", "n": "5"}));
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("app notin (db)", true),
            ("missing notin (db)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier=fe", true),
            ("app=web, tier=be", false),
            ("n>4", true),
            ("n<4", false),
            ("example.com/x", false),
        ];
        for (sel, want) in cases {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(&obj), want, "{sel}");
        }
    }

    /// Found by the `apiserver_request` fuzz target: kube-apiserver reads `()` as the set `{""}`
    /// and an empty place in a set (`(web,)`, `(,web)`, `(,,web)`) as `""`; these were 400s.
    #[test]
    fn empty_values_in_a_label_value_set_are_the_empty_string() {
        let with = |labels: Value| labeled(labels);
        for (sel, labels, want) in [
            ("app in ()", json!({"app": ""}), true),
            ("app in ()", json!({"app": "web"}), false),
            ("app in ()", json!({}), false),
            ("app in (web,)", json!({"app": ""}), true),
            ("app in (,web)", json!({"app": "web"}), true),
            ("app in (,,web)", json!({"app": ""}), true),
            ("app notin (web,)", json!({"app": ""}), false),
            ("app notin (web,)", json!({"app": "db"}), true),
        ] {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(
                parsed.matches(&with(labels.clone())),
                want,
                "{sel} on {labels}"
            );
        }
        // An empty place right before the closing parenthesis after a double comma is not one.
        assert!(LabelSelector::parse("app in (a,,)").is_err());
    }

    #[test]
    fn malformed_label_selectors_are_rejected_with_a_reason() {
        for sel in [
            "app in web",
            "app in (a,,)",
            "a b",
            "=x",
            "app=web,",
            "app=web=x",
            "bad key=1",
            "-a=1",
            "a=-b",
            "n>x",
        ] {
            let err = LabelSelector::parse(sel).expect_err(sel);
            assert!(!err.is_empty(), "{sel}");
        }
    }

    #[test]
    fn field_selectors_check_supported_labels_and_match_values() {
        let pods = ResourceInfo::of::<k8s_openapi::api::core::v1::Pod>();
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", "hostNetwork": true}});
        let sel =
            FieldSelector::parse("spec.nodeName=n1,metadata.namespace!=other", &pods).unwrap();
        assert!(sel.matches(&pod));
        assert!(
            FieldSelector::parse("spec.hostNetwork=true", &pods)
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("status.phase=Running", &pods)
                .unwrap()
                .matches(&pod)
        );
        assert!(
            FieldSelector::parse("status.phase=", &pods)
                .unwrap()
                .matches(&pod)
        );
        assert_eq!(
            FieldSelector::parse("metadata.name==p", &pods)
                .unwrap()
                .required_name(),
            Some("p")
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=1", &pods).unwrap_err(),
            "field label not supported: spec.foo"
        );
        assert!(
            FieldSelector::parse("nonsense", &pods)
                .unwrap_err()
                .starts_with("invalid selector")
        );
        let nodes = ResourceInfo::of::<k8s_openapi::api::core::v1::Node>();
        assert!(FieldSelector::parse("metadata.namespace=x", &nodes).is_err());
        let escaped = FieldSelector::parse(r"metadata.name=a\,b", &pods).unwrap();
        assert!(escaped.matches(&json!({"metadata": {"name": "a,b"}})));
    }
}
