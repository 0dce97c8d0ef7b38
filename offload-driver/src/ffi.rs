//! Opening a driver library at run time and reading what it hands back: the library guard
//! ([`Library`]), a symbol table loaded from it and kept beside it ([`Loaded`]), and the C
//! string helpers. Nothing here calls a driver entry point; which library and which
//! signatures is each backend's `ffi` module's business.

use std::ffi::{CStr, c_char, c_void};
use std::ops::Deref;
use std::sync::Arc;

use libloading::os::unix::{Library as RawLibrary, RTLD_LOCAL, RTLD_NOW};

use crate::failure::LoadError;

/// An opened driver library, and the name it was found under. Whatever holds an address
/// from it holds this (in an `Arc`), so the addresses stay valid.
///
/// ```
/// use offload_driver::Library;
/// // SAFETY: libc's initialisers have run already; opening it again only counts a reference.
/// let libc = unsafe { Library::open(&["liboffload-absent.so", "libc.so.6"]) }.unwrap();
/// assert_eq!(libc.name(), "libc.so.6");
/// assert!(!libc.lookup("getpid").is_null());
/// assert!(libc.lookup("offload_no_such_symbol").is_null());
/// ```
pub struct Library {
    name: &'static str,
    library: RawLibrary,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library").field("name", &self.name).finish()
    }
}

impl Library {
    /// Opens the first of `names` that loads, with `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`.
    /// When none loads, the error names them all (`a, b`) with the loader's message for
    /// each (`…; …`).
    ///
    /// The library stays mapped after the guard goes (`RTLD_NODELETE`): drivers have no
    /// deinitialisation, and once initialised their own threads run their code, so
    /// unmapping one would pull code from under them. A later open just finds it again.
    ///
    /// # Safety
    ///
    /// Loading a library runs its initialisers: each of `names` must be a library whose
    /// initialisers only set up its own state and are sound to run at any time.
    ///
    /// ```
    /// use offload_driver::{Library, LoadError};
    /// // SAFETY: neither library exists, so no initialiser runs.
    /// let opened = unsafe { Library::open(&["libx.so", "liby.so"]) };
    /// let Err(LoadError { library, reason }) = opened else { unreachable!() };
    /// assert_eq!(library, "libx.so, liby.so");
    /// assert!(reason.starts_with("libx.so") && reason.contains("; liby.so"), "{reason}");
    /// // One name: the loader's message without the name again.
    /// // SAFETY: as above.
    /// let Err(LoadError { library, reason }) = (unsafe { Library::open(&["libx.so"]) }) else {
    ///     unreachable!()
    /// };
    /// assert_eq!(library, "libx.so");
    /// assert!(reason.starts_with("cannot open shared object file"), "{reason}");
    /// ```
    pub unsafe fn open(names: &[&'static str]) -> Result<Arc<Library>, LoadError> {
        let mut errors = Vec::new();
        for &name in names {
            // SAFETY: the caller vouches for the initialisers of every name.
            match unsafe {
                RawLibrary::open(Some(name), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE)
            } {
                Ok(library) => return Ok(Arc::new(Library { name, library })),
                Err(e) => errors.push(e.to_string()),
            }
        }
        if let ([name], [error]) = (names, errors.as_mut_slice()) {
            // The loader's message starts with the name, which the error names already
            // ("libcuda.so.1: libcuda.so.1: cannot open …" read twice).
            if let Some(rest) = error.strip_prefix(&format!("{name}: ")) {
                *error = rest.to_string();
            }
        }
        Err(LoadError {
            library: names.join(", "),
            reason: errors.join("; "),
        })
    }

    /// The name the library was found under.
    ///
    /// ```
    /// use offload_driver::Library;
    /// // SAFETY: libc is loaded already.
    /// let libc = unsafe { Library::open(&["libc.so.6"]) }.unwrap();
    /// assert_eq!(libc.name(), "libc.so.6");
    /// ```
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The address of `symbol` in the library, or null when it has none.
    ///
    /// ```
    /// use offload_driver::Library;
    /// // SAFETY: libc is loaded already.
    /// let libc = unsafe { Library::open(&["libc.so.6"]) }.unwrap();
    /// assert!(!libc.lookup("malloc").is_null());
    /// ```
    pub fn lookup(&self, symbol: &str) -> *const c_void {
        // SAFETY: the symbol is taken as an untyped address, which is sound whatever it is;
        // only a `SymbolTable` gives it a type, under its own contract.
        match unsafe { self.library.get::<*const c_void>(symbol.as_bytes()) } {
            Ok(symbol) => symbol.into_raw().cast_const(),
            Err(_) => std::ptr::null(),
        }
    }
}

/// A table of entry points, as [`functions!`](crate::functions) declares one.
///
/// ```
/// use offload_driver::SymbolTable;
/// offload_driver::functions! {
///     api = "C library";
///     required { getpid = "getpid": fn() -> i32; }
///     optional {}
/// }
/// // SAFETY: nothing is found, so nothing is converted.
/// let none = unsafe { <Functions as SymbolTable>::load(|_| std::ptr::null()) };
/// assert_eq!(none.err(), Some("getpid"));
/// ```
pub trait SymbolTable: Sized {
    /// Fills the table through `lookup`, which gives the address of a symbol or null. A
    /// missing required symbol is `Err(its name)`.
    ///
    /// # Safety
    ///
    /// Every non-null address `lookup` returns for a name must be that entry point, with
    /// the signature the table declares, and must stay valid for as long as the table is
    /// used.
    unsafe fn load(lookup: impl FnMut(&'static str) -> *const c_void)
    -> Result<Self, &'static str>;
}

/// A symbol table read from a library, kept beside the library's guard: the table never
/// outlives the library it points into. It reads as the table (`Deref`).
///
/// ```
/// use offload_driver::Loaded;
/// offload_driver::functions! {
///     api = "C library";
///     required { getpid = "getpid": fn() -> i32; }
///     optional { offload_absent = "offload_absent": fn() -> i32; }
/// }
/// // SAFETY: libc is loaded already, and `getpid` has this signature in it.
/// let libc = unsafe { Loaded::<Functions>::open(&["libc.so.6"]) }.unwrap();
/// assert_eq!(libc.library().name(), "libc.so.6");
/// assert!(libc.offload_absent.is_none());
/// // SAFETY: getpid takes nothing and cannot fail.
/// assert_eq!(unsafe { (libc.getpid)() }, std::process::id() as i32);
/// ```
pub struct Loaded<T> {
    table: T,
    library: Arc<Library>,
}

impl<T> Loaded<T> {
    /// Opens the first of `names` that loads ([`Library::open`]) and reads the table from
    /// it. A missing required symbol is a [`LoadError`] naming the library and
    /// `missing symbol X`.
    ///
    /// # Safety
    ///
    /// As [`Library::open`] for `names`; and every symbol `T` declares must, where the
    /// library has it, be that entry point with the signature `T` gives it.
    ///
    /// ```
    /// use offload_driver::{LoadError, Loaded};
    /// offload_driver::functions! {
    ///     api = "C library";
    ///     required { offload_absent = "offload_absent": fn() -> i32; }
    ///     optional {}
    /// }
    /// // SAFETY: libc is loaded already; the one symbol asked for is absent.
    /// let Err(LoadError { library, reason }) =
    ///     (unsafe { Loaded::<Functions>::open(&["libc.so.6"]) })
    /// else {
    ///     unreachable!()
    /// };
    /// assert_eq!((library.as_str(), reason.as_str()), ("libc.so.6", "missing symbol offload_absent"));
    /// ```
    pub unsafe fn open(names: &[&'static str]) -> Result<Loaded<T>, LoadError>
    where
        T: SymbolTable,
    {
        // SAFETY: the caller vouches for the libraries' initialisers.
        let library = unsafe { Library::open(names) }?;
        // SAFETY: every address comes from that library for a symbol `T` declares, which the
        // caller vouches has that signature; the table is stored beside the guard, which
        // keeps the addresses valid for as long as the table exists.
        let table =
            unsafe { T::load(|symbol| library.lookup(symbol)) }.map_err(|missing| LoadError {
                library: library.name().into(),
                reason: format!("missing symbol {missing}"),
            })?;
        Ok(Loaded { table, library })
    }

    /// The library the table points into.
    ///
    /// ```
    /// use offload_driver::Loaded;
    /// offload_driver::functions! { api = "C library"; required {} optional {} }
    /// // SAFETY: libc is loaded already; the table is empty.
    /// let libc = unsafe { Loaded::<Functions>::open(&["libc.so.6"]) }.unwrap();
    /// assert_eq!(libc.library().name(), "libc.so.6");
    /// ```
    pub fn library(&self) -> &Arc<Library> {
        &self.library
    }
}

impl<T> Deref for Loaded<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.table
    }
}

/// The text of a buffer a driver filled with a NUL-terminated string (all of it if the
/// driver wrote no NUL).
///
/// ```
/// use std::ffi::c_char;
/// let buffer: [c_char; 8] = [b'G' as c_char, b'P' as c_char, b'U' as c_char, 0, 7, 7, 7, 7];
/// assert_eq!(offload_driver::text_of(&buffer), "GPU");
/// assert_eq!(offload_driver::text_of(&buffer[..2]), "GP");
/// ```
pub fn text_of(buffer: &[c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A copy of the NUL-terminated string a driver returned, or `None` for a null pointer.
///
/// # Safety
///
/// `text` must be null or point to a NUL-terminated string that stays valid during the call
/// (drivers return static ones).
///
/// ```
/// // SAFETY: a static C string literal.
/// assert_eq!(unsafe { offload_driver::static_text(c"no device".as_ptr()) }.as_deref(), Some("no device"));
/// // SAFETY: null is allowed.
/// assert_eq!(unsafe { offload_driver::static_text(std::ptr::null()) }, None);
/// ```
pub unsafe fn static_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null, and by the contract a NUL-terminated string; it is copied at once.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}
