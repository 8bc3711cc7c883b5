//! Running user-supplied functions so that a panic in one becomes an error, not a dead thread.
//!
//! Key functions, index functions and transforms are the caller's code, and they run on the
//! threads that keep an informer alive: the reflector's task and the pop loop. A panic there must
//! not take the thread down with it (the cache would freeze while the informer still looked
//! healthy), so every layer calls them through [`catch_panic`], and refuses the object the
//! function panicked on like any other bad input.

use std::any::Any;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A panic caught in a user-supplied function, with its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Panicked {
    message: String,
}

impl Panicked {
    /// A caught panic with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The panic's message (`"(non-string panic payload)"` when it was not a string).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The caught panic for a payload `catch_unwind` returned.
    pub fn from_payload(payload: &(dyn Any + Send)) -> Self {
        Self::new(panic_message(payload))
    }
}

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "panicked: {}", self.message)
    }
}

impl std::error::Error for Panicked {}

/// The message of a panic payload: its `&str` or `String`, else a placeholder.
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(non-string panic payload)")
}

/// Runs `f`, turning a panic into [`Panicked`].
///
/// The callers only read shared state in `f` (an object behind a shared reference), so nothing
/// is left half-changed by an unwind: that is what makes `AssertUnwindSafe` sound here.
///
/// ```
/// use informer_store::catch_panic;
/// assert_eq!(catch_panic(|| 1 + 1), Ok(2));
/// let caught = catch_panic(|| -> u32 { panic!("boom") }).unwrap_err();
/// assert_eq!(caught.message(), "boom");
/// ```
pub fn catch_panic<T>(f: impl FnOnce() -> T) -> Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|payload| Panicked::from_payload(&*payload))
}
