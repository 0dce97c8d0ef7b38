//! The [`functions!`](crate::functions) macro: a driver's entry points as one table of
//! function pointers, filled through a lookup closure (`dlsym` on the real library, or a
//! test's own), in the style of ash's loaders.

/// Declares `Functions`: one field per entry point, `unsafe extern "C" fn` for required ones
/// and `Option<..>` for optional ones, and `Functions::load` (also its
/// [`SymbolTable`](crate::SymbolTable) impl) that fills them. A required symbol that is
/// missing is an error naming it; an optional one is `None`. `api` names the C API in the
/// generated docs and safety contract.
///
/// ```
/// use std::ffi::{c_char, c_void};
/// offload_driver::functions! {
///     api = "C library";
///     required { strlen = "strlen": fn(*const c_char) -> usize; }
///     optional { offload_absent = "offload_absent": fn() -> i32; }
/// }
/// extern "C" fn stub() {}
/// // SAFETY: the table is only inspected for which entries are present, never called.
/// let table = unsafe {
///     Functions::load(|name| if name == "strlen" { stub as *const c_void } else { std::ptr::null() })
/// };
/// assert!(table.is_ok_and(|t| t.offload_absent.is_none()));
/// // SAFETY: nothing is found, so nothing is converted.
/// assert_eq!(unsafe { Functions::load(|_| std::ptr::null()) }.err(), Some("strlen"));
/// ```
#[macro_export]
macro_rules! functions {
    (
        api = $api:literal;
        required { $($req:ident = $req_sym:literal: fn($($req_arg:ty),*) -> $req_ret:ty;)* }
        optional { $($opt:ident = $opt_sym:literal: fn($($opt_arg:ty),*) -> $opt_ret:ty;)* }
    ) => {
        #[doc = concat!("The ", $api, " entry points offload calls.")]
        pub(crate) struct Functions {
            $(
                #[doc = concat!("`", $req_sym, "`")]
                pub(crate) $req: unsafe extern "C" fn($($req_arg),*) -> $req_ret,
            )*
            $(
                #[doc = concat!("`", $opt_sym, "`, where the driver has it")]
                pub(crate) $opt: Option<unsafe extern "C" fn($($opt_arg),*) -> $opt_ret>,
            )*
        }

        impl Functions {
            /// Fills the table through `lookup`, which gives the address of a symbol or null.
            /// A missing required symbol is `Err(its name)`.
            ///
            /// # Safety
            ///
            #[doc = concat!(
                "Every non-null address `lookup` returns for a name must be that function of ",
                "the ", $api, " API, with the signature declared here, and must stay valid ",
                "for as long as the table is used."
            )]
            #[allow(unused_mut, unused_variables)]
            pub(crate) unsafe fn load(
                mut lookup: impl FnMut(&'static str) -> *const ::std::ffi::c_void,
            ) -> ::std::result::Result<Functions, &'static str> {
                Ok(Functions {
                    $($req: {
                        let address = lookup($req_sym);
                        if address.is_null() {
                            return Err($req_sym);
                        }
                        // SAFETY: the address is non-null and, by this function's contract,
                        // is this entry point with this signature; function and data
                        // pointers have the same size on every target dlsym exists on.
                        unsafe {
                            ::std::mem::transmute::<
                                *const ::std::ffi::c_void,
                                unsafe extern "C" fn($($req_arg),*) -> $req_ret,
                            >(address)
                        }
                    },)*
                    $($opt: {
                        let address = lookup($opt_sym);
                        if address.is_null() {
                            None
                        } else {
                            // SAFETY: as for the required entry points above.
                            Some(unsafe {
                                ::std::mem::transmute::<
                                    *const ::std::ffi::c_void,
                                    unsafe extern "C" fn($($opt_arg),*) -> $opt_ret,
                                >(address)
                            })
                        }
                    },)*
                })
            }
        }

        impl $crate::SymbolTable for Functions {
            unsafe fn load(
                lookup: impl FnMut(&'static str) -> *const ::std::ffi::c_void,
            ) -> ::std::result::Result<Functions, &'static str> {
                // SAFETY: the trait's contract is `Functions::load`'s.
                unsafe { Functions::load(lookup) }
            }
        }
    };
}

/// Checks how a symbol table `T` loads (what a backend's test of its table asks): a load
/// that lacks the required symbol `required` fails naming it; a load that finds nothing
/// fails naming `first`, the first required symbol; a load that lacks every symbol
/// starting with `optional` (all optional ones) succeeds, and `probe` holds of the table
/// it gives (say, that those entries are `None` and the others not). The lookups give a
/// stand-in for every symbol they find. `Err` says which check failed.
///
/// # Safety
///
/// The tables are only inspected: no entry of them is ever called (`probe` reads fields
/// only).
///
/// ```
/// offload_driver::functions! {
///     api = "C library";
///     required { strlen = "strlen": fn(*const i8) -> usize; }
///     optional { offload_absent = "offload_absent": fn() -> i32; }
/// }
/// // SAFETY: `probe` only reads which entries are present.
/// let checked = unsafe {
///     offload_driver::check_symbol_table("strlen", "strlen", "offload_", |t: &Functions| {
///         t.offload_absent.is_none()
///     })
/// };
/// assert_eq!(checked, Ok(()));
/// ```
#[allow(unsafe_code)]
pub unsafe fn check_symbol_table<T: crate::SymbolTable>(
    required: &'static str,
    first: &'static str,
    optional: &str,
    probe: impl FnOnce(&T) -> bool,
) -> Result<(), String> {
    extern "C" fn stand_in() {}
    let found = stand_in as *const std::ffi::c_void;
    let without = |absent: &dyn Fn(&str) -> bool| {
        // SAFETY: the caller's promise: the table is only inspected, never called, so the
        // stand-in is never called through another signature.
        unsafe {
            T::load(|name| {
                if absent(name) {
                    std::ptr::null()
                } else {
                    found
                }
            })
        }
    };
    match without(&|name| name == required) {
        Err(name) if name == required => {}
        other => return Err(format!("without {required}: {:?}", other.err())),
    }
    match without(&|_| true) {
        Err(name) if name == first => {}
        other => return Err(format!("without any symbol: {:?}", other.err())),
    }
    match without(&|name| name.starts_with(optional)) {
        Ok(table) if probe(&table) => Ok(()),
        Ok(_) => Err(format!("without {optional}*: the table is not as expected")),
        Err(name) => Err(format!("without {optional}*: {name} is missing")),
    }
}
