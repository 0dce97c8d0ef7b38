//! [`Kernel`]: a kernel of a loaded module, with its declared parameters; it keeps its
//! module loaded while it lives; and [`Module::kernel`], which makes one.

use crate::sync::{Arc, read, write};
use std::fmt;

use super::module::{KernelSlot, Module};
use crate::error::{Caller, Error, Result};
use crate::hal::ParamKind;
use crate::handles::fixes::Fix;

/// An entry point of a module. Holds its module alive.
///
/// ```
/// # use offload::{Offload, Program};
/// # let rt = Offload::init()?;
/// # let dev = rt.devices()?.remove(0);
/// let k = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("add_one")?;
/// assert_eq!(k.name(), "add_one");
/// assert_eq!(k.params().len(), 2);
/// # Ok::<(), offload::Error>(())
/// ```
#[derive(Clone)]
pub struct Kernel {
    pub(super) module: Module,
    pub(crate) index: usize,
    pub(super) name: Arc<str>,
    pub(super) params: Arc<[ParamKind]>,
    /// Whether its program is proven memory-safe to launch (`hal::Program::verified`).
    pub(super) verified: bool,
    /// The workgroup size it declares (`hal::Program::workgroup_size`).
    pub(super) workgroup: Option<[u32; 3]>,
}

impl Kernel {
    /// Whether offload proved this kernel memory-safe to launch, so that
    /// [`Queue::run`](crate::Queue::run) launches it without `unsafe`: today, kernels of
    /// WGSL programs offload compiled (`Program::from_source(Source::wgsl(..))`), whose
    /// every access is bounds-checked against its buffer. Native and prebuilt device code is not.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// assert!(!k.is_verified());
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    /// The workgroup (block) size the kernel declares, where its language declares one
    /// (WGSL's `@workgroup_size`, SPIR-V's `LocalSize`); `None` where the launch chooses
    /// (C kernels, CUDA). [`Queue::run`](crate::Queue::run) launches a kernel that declares
    /// one with that size only (S1).
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// assert_eq!(k.workgroup_size(), None); // a C kernel: the launch chooses
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn workgroup_size(&self) -> Option<[u32; 3]> {
        self.workgroup
    }

    /// A 1-D launch with at least one thread per element, in blocks of the size the kernel
    /// declares when it declares a 1-D one (what [`Queue::run`](crate::Queue::run) needs),
    /// otherwise [`Dims::for_num_elems`](crate::Dims::for_num_elems)'s.
    ///
    /// ```
    /// # use offload::{Dims, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// assert_eq!(k.dims_for(1000), Dims::for_num_elems(1000)); // it declares no size
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn dims_for(&self, n: u32) -> crate::Dims {
        match self.workgroup {
            Some([x, 1, 1]) if x > 0 => crate::Dims::grid([n.div_ceil(x), 1, 1]).block([x, 1, 1]),
            _ => crate::Dims::for_num_elems(n),
        }
    }

    /// Its name in the module.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("noop")?;
    /// assert_eq!(k.name(), "noop");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The parameters the kernel declares.
    ///
    /// ```
    /// # use offload::{Offload, ParamKind, Program, ScalarType::U32};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let k = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("fill")?;
    /// assert_eq!(k.params(), &[ParamKind::Buffer, ParamKind::Typed(U32), ParamKind::Typed(U32)]);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn params(&self) -> &[ParamKind] {
        &self.params
    }

    /// Whether `given` arguments are as many as the kernel takes (P4): else
    /// `Error::InvalidArgument` for `call`, listing its parameters, and, for more
    /// arguments than parameters where a parameter is a vector, matrix or struct, how to
    /// pass one as one argument, in `caller`'s words. Every launch checks it first; a
    /// binding that reads its arguments by the kernel's parameters (the C API) checks it
    /// before it reads them.
    ///
    /// ```
    /// # use offload::{Caller, Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let fill = Program::new(offload::host::fixtures::KERNELS).load(&dev)?.kernel("fill")?;
    /// assert!(fill.check_arg_count(Caller::Rust, "Queue::launch", 3).is_ok());
    /// let e = fill.check_arg_count(Caller::C, "offload_queue_launch", 2).unwrap_err();
    /// assert_eq!(
    ///     e.to_string(),
    ///     "offload_queue_launch: invalid argument: `fill` takes 3 arguments (a buffer, a u32, \
    ///      a u32); 2 given"
    /// );
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn check_arg_count(&self, caller: Caller, call: &'static str, given: usize) -> Result<()> {
        let params = self.params();
        if params.len() == given {
            return Ok(());
        }
        let list: Vec<String> = params.iter().map(ToString::to_string).collect();
        // Two f32s for a `vec2<f32>`: the composite is one argument.
        let hint =
            if given > params.len() && params.iter().any(|p| matches!(p, ParamKind::Pod { .. })) {
                format!(" ({})", Fix::OneComposite.words(caller))
            } else {
                String::new()
            };
        Err(Error::invalid(
            call,
            format!(
                "`{}` takes {} argument{} ({}); {given} given{hint}",
                self.name,
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                list.join(", "),
            ),
        ))
    }

    /// The module it belongs to.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert_eq!(m.kernel("noop")?.module(), &m);
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn module(&self) -> &Module {
        &self.module
    }
}

// The call of a `Module` that makes its kernels: here, so that `module` names no kernel.
impl Module {
    /// Looks up a kernel. A name the module lacks is `Error::SymbolNotFound`.
    ///
    /// ```
    /// # use offload::{Offload, Program};
    /// # let rt = Offload::init()?;
    /// # let dev = rt.devices()?.remove(0);
    /// let m = Program::new(offload::host::fixtures::KERNELS).load(&dev)?;
    /// assert!(m.kernel("noop").is_ok());
    /// let err = m.kernel("nope").unwrap_err();
    /// assert!(matches!(err, offload::Error::SymbolNotFound { .. }));
    /// // The error lists what the module has.
    /// assert!(err.to_string().contains("add_one"), "{err}");
    /// # Ok::<(), offload::Error>(())
    /// ```
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let find = |kernels: &[KernelSlot]| {
            let index = kernels.iter().position(|k| k.name == name)?;
            Some((
                index,
                kernels[index].params.clone(),
                kernels[index].workgroup,
            ))
        };
        self.with_loaded("Module::kernel", |loaded| {
            if let Some(found) = find(&read(&loaded.kernels)) {
                return Ok(found);
            }
            let raw = loaded.raw.kernel(name).map_err(|e| match e {
                Error::SymbolNotFound {
                    backend,
                    call,
                    symbol,
                    hint,
                } if hint.is_empty() => {
                    let kernels = loaded.raw.kernels();
                    let hint = if kernels.is_empty() {
                        "the module has no kernels".to_string()
                    } else {
                        format!("the module's kernels are `{}`", kernels.join("`, `"))
                    };
                    Error::SymbolNotFound {
                        backend,
                        call,
                        symbol,
                        hint,
                    }
                }
                other => other,
            })?;
            let params: Arc<[ParamKind]> = Arc::from(raw.params());
            let workgroup = raw.workgroup_size();
            let mut kernels = write(&loaded.kernels);
            // Another thread may have resolved it meanwhile: keep one slot per name.
            if let Some(found) = find(&kernels) {
                return Ok(found);
            }
            kernels.push(KernelSlot {
                name: name.to_string(),
                params: params.clone(),
                workgroup,
                raw,
            });
            Ok((kernels.len() - 1, params, workgroup))
        })
        .and_then(|(index, params, workgroup)| {
            let verified = self.with_loaded("Module::kernel", |l| Ok(l.raw.verified()))?;
            Ok(Kernel {
                module: self.clone(),
                index,
                name: Arc::from(name),
                params,
                verified,
                workgroup,
            })
        })
    }
}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}` of {}", self.name, self.module)
    }
}

/// `kernel `saxpy` of the vulkan module of program "blas"`.
impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
