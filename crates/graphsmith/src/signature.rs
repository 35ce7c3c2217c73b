//! Parameter directions from a kernel's mangled C++ name, for graphs graphsmith did not build.

use graphsmith_model::AccessMode;

/// Per parameter of a mangled C++ kernel: `Some(Read)` for a pointer to const, `Some(Unknown)`
/// for another pointer (it may be read or written), `None` for a non-pointer. `None` overall
/// when the name carries no signature (an `extern "C"` kernel).
pub(crate) fn pointer_modes(mangled: &str) -> Option<Vec<Option<AccessMode>>> {
    graphsmith_model::pointer_param_modes(mangled)
}
