//! Kernel signatures: which pointer parameters of a C++ kernel may write, from its mangled name.
//!
//! A graph that graphsmith did not build has kernel nodes whose arguments are just bytes. The
//! runtime matches argument bytes to live allocations; the mangled name then says, for C++
//! kernels, which parameters are `const T*` (the kernel only reads through them). Kernels
//! declared `extern "C"` have no mangled signature, so their pointers stay
//! [`AccessMode::Unknown`].

use cpp_demangle::{DemangleOptions, Symbol};

use crate::node::AccessMode;

/// The C++ form of a mangled (Itanium ABI) symbol, e.g. `_Z4projPKfS0_Pfii` ->
/// `proj(float const*, float const*, float*, int, int)`; `None` when `symbol` is not a mangled
/// name (an `extern "C"` kernel such as `gs_axpy_f32`).
pub fn demangle(symbol: &str) -> Option<String> {
    Symbol::new(symbol).ok()?.demangle().ok()
}

/// The qualified name of a mangled symbol without parameters, return type or template
/// arguments, e.g. `_ZN4gemm6kernelIfLi128EEEvPKT_S3_PS1_i` -> `gemm::kernel`; `None` when
/// `symbol` is not a mangled name.
pub fn demangled_name(symbol: &str) -> Option<String> {
    let options = DemangleOptions::new().no_params().no_return_type();
    let full = Symbol::new(symbol)
        .ok()?
        .demangle_with_options(&options)
        .ok()?;
    Some(strip_template_args(&full))
}

/// Removes every `<...>` group (with nesting), e.g. `a::b<int, c<d> >::e` -> `a::b::e`. An
/// `operator<` or `operator<<` in the name is kept.
fn strip_template_args(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for c in name.chars() {
        match c {
            '<' if depth > 0 || !out.ends_with("operator") && !out.ends_with("operator<") => {
                depth += 1
            }
            '>' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// For each parameter of a mangled C++ kernel name, how the kernel may touch memory through
/// it: `Some(Read)` for a pointer to const (`const T*`, demangled `T const*`), `Some(Unknown)`
/// for any other pointer (it may read or write), `None` for a parameter that is not a pointer
/// (an integer, a float, a struct passed by value: a struct may still hold pointers, whose
/// direction is unknown).
///
/// Returns `None` when `mangled` is not a mangled name (an `extern "C"` kernel), or when its
/// parameter list cannot be found.
///
/// ```
/// use graphsmith_model::{pointer_param_modes, AccessMode::{Read, Unknown}};
/// // __global__ void attention(const float* q, const float* k, const float* v, float* out, int n)
/// assert_eq!(
///     pointer_param_modes("_Z9attentionPKfS0_S0_Pfi"),
///     Some(vec![Some(Read), Some(Read), Some(Read), Some(Unknown), None])
/// );
/// assert_eq!(pointer_param_modes("gs_axpy_f32"), None);
/// ```
pub fn pointer_param_modes(mangled: &str) -> Option<Vec<Option<AccessMode>>> {
    let text = demangle(mangled)?;
    let params = parameter_list(&text)?;
    Some(params.iter().map(|p| param_mode(p)).collect())
}

/// For each parameter of a mangled C++ kernel name, the length `N` when the parameter is an
/// array of `char*` passed by value (`at::detail::Array<char*, N>` or `std::array<char*, N>`:
/// how PyTorch's elementwise kernels receive their tensors' data pointers, the output first),
/// else `None`. Returns `None` when `mangled` is not a mangled name or its parameter list cannot
/// be found.
///
/// ```
/// use graphsmith_model::char_pointer_arrays;
/// // at::native::vectorized_elementwise_kernel<4, F, std::array<char*, 2>>(int, F, std::array<char*, 2>)
/// let name = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_";
/// assert_eq!(char_pointer_arrays(name), Some(vec![None, None, Some(2)]));
/// ```
pub fn char_pointer_arrays(mangled: &str) -> Option<Vec<Option<usize>>> {
    let text = demangle(mangled)?;
    let params = parameter_list(&text)?;
    Some(params.iter().map(|p| char_pointer_array(p)).collect())
}

/// `N` when `param` (demangled) is `at::detail::Array<char*, N>` or `std::array<char*, N>`.
fn char_pointer_array(param: &str) -> Option<usize> {
    let compact: String = param.chars().filter(|c| !c.is_whitespace()).collect();
    let rest = ["at::detail::Array<char*,", "std::array<char*,"]
        .iter()
        .find_map(|prefix| compact.strip_prefix(prefix))?;
    let count = rest.strip_suffix('>')?;
    // `2`, `2ul`, or cpp_demangle's `(unsigned long)2`.
    let count = match count.strip_prefix('(') {
        Some(cast) => &cast[cast.find(')')? + 1..],
        None => count,
    };
    let digits = count.trim_end_matches(['u', 'l', 'U', 'L']);
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The parameters of a demangled function signature: the last top-level `(...)` group, split
/// at top-level commas. `()` and `(void)` give no parameters.
fn parameter_list(signature: &str) -> Option<Vec<String>> {
    let body = signature.trim_end();
    let body = body.strip_suffix(')')?;
    // Find the `(` that opens the final group, walking back over nested parentheses.
    let mut depth = 0usize;
    let mut open = None;
    for (i, c) in body.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' if depth == 0 => {
                open = Some(i);
                break;
            }
            '(' => depth -= 1,
            _ => {}
        }
    }
    let inner = &body[open? + 1..];
    let mut params = Vec::new();
    let mut current = String::new();
    let mut depth = 0i64;
    for c in inner.chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => depth -= 1,
            ',' if depth == 0 => {
                params.push(current.trim().to_string());
                current.clear();
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    let last = current.trim();
    if !last.is_empty() {
        params.push(last.to_string());
    }
    if params.len() == 1 && params[0] == "void" {
        params.clear();
    }
    Some(params)
}

/// The mode of one demangled parameter type.
fn param_mode(param: &str) -> Option<AccessMode> {
    let pointee = param.trim().strip_suffix('*')?;
    // `T const*`, `T const volatile*`, `const T*`: the qualifiers of the pointee.
    let pointee = pointee.trim_end();
    let mut words = pointee.rsplit(' ');
    let trailing_const = words
        .by_ref()
        .take_while(|w| matches!(*w, "const" | "volatile" | "restrict" | "__restrict"))
        .any(|w| w == "const");
    let leading_const = pointee.starts_with("const ") && !pointee.ends_with('*');
    if trailing_const || leading_const {
        Some(AccessMode::Read)
    } else {
        Some(AccessMode::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AccessMode::{Read, Unknown};

    #[test]
    fn attention_and_proj_use_substitutions() {
        assert_eq!(
            pointer_param_modes("_Z9attentionPKfS0_S0_Pfi"),
            Some(vec![
                Some(Read),
                Some(Read),
                Some(Read),
                Some(Unknown),
                None
            ])
        );
        assert_eq!(
            pointer_param_modes("_Z4projPKfS0_Pfii"),
            Some(vec![Some(Read), Some(Read), Some(Unknown), None, None])
        );
    }

    #[test]
    fn templated_and_namespaced() {
        // template <typename T, int N> __global__ void gemm::kernel(const T*, const T*, T*, int)
        let name = "_ZN4gemm6kernelIfLi128EEEvPKT_S3_PS1_i";
        assert_eq!(
            demangle(name).as_deref(),
            Some("void gemm::kernel<float, 128>(float const*, float const*, float*, int)")
        );
        assert_eq!(
            pointer_param_modes(name),
            Some(vec![Some(Read), Some(Read), Some(Unknown), None])
        );
        assert_eq!(demangled_name(name).as_deref(), Some("gemm::kernel"));
    }

    #[test]
    fn struct_by_value_function_pointer_volatile_and_pointer_to_pointer() {
        // qux(float4*, float4 const*, int const&)
        assert_eq!(
            pointer_param_modes("_Z3quxP6float4PK6float4RKi"),
            Some(vec![Some(Unknown), Some(Read), None])
        );
        // baz(void (*)(int), char const*)
        assert_eq!(
            pointer_param_modes("_Z3bazPFviEPKc"),
            Some(vec![None, Some(Read)])
        );
        // f(float volatile*, float volatile const*)
        assert_eq!(
            pointer_param_modes("_Z1fPVfPKVf"),
            Some(vec![Some(Unknown), Some(Read)])
        );
        // g(float const**): the kernel may write the pointers
        assert_eq!(pointer_param_modes("_Z1gPPKf"), Some(vec![Some(Unknown)]));
        // h(float const* const*): read-only array of pointers
        assert_eq!(pointer_param_modes("_Z1hPKPKf"), Some(vec![Some(Read)]));
    }

    #[test]
    fn no_parameters_and_not_mangled() {
        assert_eq!(pointer_param_modes("_Z3barv"), Some(vec![]));
        assert_eq!(pointer_param_modes("gs_axpy_f32"), None);
        assert_eq!(pointer_param_modes(""), None);
        assert_eq!(pointer_param_modes("_Z"), None);
        assert_eq!(demangled_name("gs_axpy_f32"), None);
    }

    #[test]
    fn pytorch_kernel_with_struct_params() {
        let name = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_";
        assert_eq!(pointer_param_modes(name), Some(vec![None, None, None]));
        assert_eq!(
            demangled_name(name).as_deref(),
            Some("at::native::vectorized_elementwise_kernel")
        );
        assert_eq!(char_pointer_arrays(name), Some(vec![None, None, Some(2)]));
    }

    #[test]
    fn char_pointer_arrays_of_both_spellings() {
        assert_eq!(char_pointer_array("at::detail::Array<char*, 3>"), Some(3));
        assert_eq!(char_pointer_array("std::array<char*, 1ul>"), Some(1));
        assert_eq!(
            char_pointer_array("std::array<char*, (unsigned long)2>"),
            Some(2)
        );
        assert_eq!(char_pointer_array("std::array<float*, 2ul>"), None);
        assert_eq!(char_pointer_array("at::detail::Array<char*, N>"), None);
        assert_eq!(char_pointer_array("char*"), None);
        assert_eq!(char_pointer_arrays("gs_axpy_f32"), None);
    }
}
