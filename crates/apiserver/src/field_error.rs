//! The parts of a `Status`'s message: validation failures as apimachinery's `field.Error`
//! prints them, and the delete preconditions `rest.BeforeDelete` checks.

use std::fmt;

/// The precondition of a delete that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeletePrecondition {
    /// `preconditions.uid`.
    Uid,
    /// `preconditions.resourceVersion`.
    ResourceVersion,
}

/// One validation failure, as apimachinery's `field.Error` prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `resourceVersionMatch`.
    pub field: String,
    /// What is wrong.
    pub kind: FieldErrorKind,
}

/// The kinds of [`FieldError`] the server produces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Forbidden: <detail>`.
    Forbidden(String),
    /// `Required value: <detail>`.
    Required(String),
    /// `Unsupported value: "<value>": supported values: "a", "b"`.
    NotSupported {
        /// The rejected value.
        value: String,
        /// The accepted values.
        supported: Vec<String>,
    },
    /// `Invalid value: "<value>": <detail>`.
    Invalid {
        /// The rejected value.
        value: String,
        /// Why.
        detail: String,
    },
    /// `Invalid value: <value>: <detail>`: a rejected value that is not a string, printed
    /// without quotes as Go prints it (`0`, `-1`, `0x0` for an unsigned zero).
    InvalidNonString {
        /// The rejected value, as printed.
        value: String,
        /// Why.
        detail: String,
    },
}

impl FieldErrorKind {
    pub(crate) fn cause_type(&self) -> &'static str {
        match self {
            FieldErrorKind::Forbidden(_) => "FieldValueForbidden",
            FieldErrorKind::Required(_) => "FieldValueRequired",
            FieldErrorKind::NotSupported { .. } => "FieldValueNotSupported",
            FieldErrorKind::Invalid { .. } | FieldErrorKind::InvalidNonString { .. } => {
                "FieldValueInvalid"
            }
        }
    }
}

impl FieldError {
    /// A `Forbidden` error on `field`.
    pub fn forbidden(field: &str, detail: &str) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: FieldErrorKind::Forbidden(detail.to_owned()),
        }
    }

    /// A `Required value` error on `field`.
    pub fn required(field: &str, detail: &str) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: FieldErrorKind::Required(detail.to_owned()),
        }
    }

    /// An `Unsupported value` error on `field`.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: FieldErrorKind::NotSupported {
                value: value.to_owned(),
                supported: supported.iter().map(|s| (*s).to_owned()).collect(),
            },
        }
    }

    /// An `Invalid value` error on `field`.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: FieldErrorKind::Invalid {
                value: value.to_owned(),
                detail: detail.to_owned(),
            },
        }
    }

    /// An `Invalid value` error on `field` whose value is not a string (printed unquoted).
    pub fn invalid_non_string(field: &str, value: &str, detail: &str) -> Self {
        FieldError {
            field: field.to_owned(),
            kind: FieldErrorKind::InvalidNonString {
                value: value.to_owned(),
                detail: detail.to_owned(),
            },
        }
    }

    /// The message without the field path (`field.Error.ErrorBody`).
    pub(crate) fn body(&self) -> String {
        match &self.kind {
            FieldErrorKind::Forbidden(d) => format!("Forbidden: {d}"),
            FieldErrorKind::Required(d) => format!("Required value: {d}"),
            FieldErrorKind::NotSupported { value, supported } => format!(
                "Unsupported value: \"{value}\": supported values: {}",
                supported
                    .iter()
                    .map(|s| format!("\"{s}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            FieldErrorKind::Invalid { value, detail } => {
                format!("Invalid value: \"{value}\": {detail}")
            }
            FieldErrorKind::InvalidNonString { value, detail } => {
                format!("Invalid value: {value}: {detail}")
            }
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}
