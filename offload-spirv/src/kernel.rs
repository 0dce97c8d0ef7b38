//! OpenCL-kernel reflection, for Level Zero: what offload needs to launch each `Kernel`
//! entry point of an OpenCL-flavour module (capability `Kernel`, `Physical64` addressing,
//! `OpenCL` memory model), and the exported module-scope variables a program may address.
//!
//! Parameters are the entry function's `OpFunctionParameter`s, in order:
//! - a pointer in `CrossWorkgroup` (OpenCL `global`) or `UniformConstant` (OpenCL
//!   `constant`) storage is a buffer ([`ParamKind::Buffer`]);
//! - an integer of 8, 16, 32 or 64 bits is [`ParamKind::Typed`] by its signedness word:
//!   OpenCL producers write 0 for every integer (OpenCL C's `int` and `uint` are the same
//!   SPIR-V type), so they come out unsigned (`u32` for `int` too); a producer that writes 1
//!   gets the signed type. A 32- or 64-bit float is `f32`/`f64`;
//! - a struct passed by value (a `Function` pointer decorated `FuncParamAttr ByVal`) is a
//!   [`ParamKind::Scalar`] of the struct's size; anything else with a well-defined size
//!   (vectors, half floats, arrays, `local` and other pointers, which are 8 bytes under
//!   `Physical64`) is a [`ParamKind::Scalar`] of that size, laid out as OpenCL C lays it out
//!   (natural alignment, 3-component vectors as 4, `CPacked` structs without padding);
//! - a type with no size a host can pass (a bool, an image, a sampler, an event) is
//!   `Error::InvalidBinary` naming the kernel and the parameter.

use std::collections::HashMap;

use offload_core::{BackendKind, ParamKind, Result};

use crate::module::{Constant, Context, Module, Type, value::*};

/// One OpenCL kernel entry point of a module.
///
/// ```
/// use offload_core::{ParamKind, ScalarType};
/// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
/// let module = offload_spirv::kernels(&image).unwrap();
/// let fill = module.kernels.iter().find(|k| k.name == "fill").unwrap();
/// assert_eq!(fill.params, [ParamKind::Buffer, ParamKind::Typed(ScalarType::U32), ParamKind::Typed(ScalarType::U32)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelEntry {
    /// The entry point's name (what `zeKernelCreate` takes).
    pub name: String,
    /// Its parameters, in order (see the module docs for the mapping).
    pub params: Vec<ParamKind>,
}

/// A module-scope variable another program may address (zeModuleGetGlobalPointer).
///
/// ```
/// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
/// let module = offload_spirv::kernels(&image).unwrap();
/// assert_eq!(module.globals, [offload_spirv::GlobalVar { name: "g".into(), size: 4 }]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobalVar {
    /// The name its `LinkageAttributes … Export` decoration gives it.
    pub name: String,
    /// Its size in bytes.
    pub size: usize,
}

/// A validated OpenCL-flavour module: its version, kernels and exported globals.
///
/// ```
/// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
/// let module = offload_spirv::kernels(&image).unwrap();
/// assert_eq!(module.version, (1, 4));
/// assert_eq!(module.kernels.len(), 4);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelModule {
    /// The SPIR-V version the module declares, `(major, minor)`.
    pub version: (u8, u8),
    /// Its `Kernel` entry points, in declaration order (names are unique).
    pub kernels: Vec<KernelEntry>,
    /// Its exported `CrossWorkgroup` variables, in declaration order (names are unique).
    pub globals: Vec<GlobalVar>,
}

/// Validates an OpenCL-flavour SPIR-V module (Kernel capability, Physical64 addressing,
/// OpenCL memory model) and reflects its Kernel entry points. Errors name no call: the
/// handle of the user's call names it.
///
/// Errors are `Error::InvalidBinary` of [`BackendKind::Ze`] with the reason;
/// [`kernels_for`] names another backend.
///
/// ```
/// use offload_core::{Error, ParamKind, ScalarType};
/// let image = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../offload-ze/fixtures/kernels.spv")).unwrap();
/// let module = offload_spirv::kernels(&image).unwrap();
/// let names: Vec<_> = module.kernels.iter().map(|k| k.name.as_str()).collect();
/// assert_eq!(names, ["add_one", "fill", "noop", "read_global"]);
/// assert_eq!(module.kernels[0].params, [ParamKind::Buffer, ParamKind::Typed(ScalarType::U32)]);
///
/// // Not SPIR-V: rejected with the reason.
/// let err = offload_spirv::kernels(b"\x7fELF\x02\x01\x01\0").unwrap_err();
/// assert!(matches!(err, Error::InvalidBinary { .. }));
/// assert!(err.to_string().contains("magic"), "{err}");
/// ```
pub fn kernels(image: &[u8]) -> Result<KernelModule> {
    kernels_for(image, BackendKind::Ze)
}

/// [`kernels`], with errors naming `backend`.
///
/// ```
/// use offload_core::{BackendKind, Error};
/// let err = offload_spirv::kernels_for(&[], BackendKind::Host).unwrap_err();
/// assert!(matches!(err, Error::InvalidBinary { backend: BackendKind::Host, .. }));
/// ```
pub fn kernels_for(image: &[u8], backend: BackendKind) -> Result<KernelModule> {
    let ctx = Context { backend, call: "" };
    let words = ctx.words(image)?;
    let header = ctx.header(&words)?;
    let module = ctx.module(&words, header)?;
    reflect(&module)
}

fn reflect(m: &Module<'_>) -> Result<KernelModule> {
    if m.capabilities.contains(&CAPABILITY_SHADER) {
        return Err(m.err(
            "the module declares the Shader capability: a Vulkan shader, not an OpenCL kernel",
        ));
    }
    if !m.capabilities.contains(&CAPABILITY_KERNEL) {
        return Err(m.err("no Kernel capability: not an OpenCL kernel module"));
    }
    let (addressing, memory) = m.memory_model;
    if memory != MEMORY_MODEL_OPENCL {
        return Err(m.err(format!(
            "memory model {memory}, not OpenCL (2): not an OpenCL kernel module"
        )));
    }
    if addressing != ADDRESSING_PHYSICAL64 {
        return Err(m.err(format!(
            "addressing model {addressing}, not Physical64 (2): Level Zero runs 64-bit kernels"
        )));
    }
    let mut layout = Layout {
        m,
        sizes: HashMap::new(),
    };
    let mut kernels = Vec::new();
    for e in m.entry_points.iter().filter(|e| e.model == MODEL_KERNEL) {
        let name = &e.name;
        let Some(function) = m.functions.get(&e.function) else {
            return Err(m.err(format!(
                "kernel `{name}` names id {}, which is not a function",
                e.function
            )));
        };
        if let Some(Type::Function(_, declared)) = m.types.get(&function.ty)
            && declared.len() != function.params.len()
        {
            return Err(m.err(format!(
                "kernel `{name}` has {} parameters but its function type {}",
                function.params.len(),
                declared.len()
            )));
        }
        let mut params = Vec::new();
        for (i, &(ty, id)) in function.params.iter().enumerate() {
            let kind = layout
                .param(ty, id)
                .map_err(|reason| m.err(format!("kernel `{name}`, parameter {i}: {reason}")))?;
            params.push(kind);
        }
        kernels.push(KernelEntry {
            name: name.clone(),
            params,
        });
    }
    if kernels.is_empty() {
        return Err(m.err("the module has no Kernel entry point"));
    }
    let mut exported: Vec<_> = m
        .globals
        .iter()
        .filter(|(_, (_, storage))| *storage == STORAGE_CROSS_WORKGROUP)
        .filter_map(|(&id, &(ptr, _))| {
            let (name, kind) = m.decorations.get(&id)?.linkage.as_ref()?;
            (*kind == LINKAGE_EXPORT).then_some((id, ptr, name))
        })
        .collect();
    exported.sort_unstable_by_key(|&(id, ..)| id);
    let mut globals: Vec<GlobalVar> = Vec::new();
    for (id, ptr, name) in exported {
        let Some(&Type::Pointer(_, pointee)) = m.types.get(&ptr) else {
            return Err(m.err(format!("global variable {id} does not have a pointer type")));
        };
        let (size, _) = layout
            .size_align(pointee, 0)
            .map_err(|reason| m.err(format!("global `{name}`: {reason}")))?;
        if name.is_empty() {
            return Err(m.err(format!(
                "global variable {id} is exported with an empty name"
            )));
        }
        if globals.iter().any(|g| g.name == *name) {
            return Err(m.err(format!("two globals are exported as `{name}`")));
        }
        globals.push(GlobalVar {
            name: name.clone(),
            size,
        });
    }
    let v = m.header.version;
    Ok(KernelModule {
        version: (v.major, v.minor),
        kernels,
        globals,
    })
}

/// OpenCL C sizes and alignments of a module's types, memoised (a type is laid out once
/// however often it is nested).
struct Layout<'m, 'a> {
    m: &'m Module<'a>,
    sizes: HashMap<u32, (usize, usize)>,
}

impl Layout<'_, '_> {
    /// The kind of kernel parameter `id` of type `ty`.
    fn param(&mut self, ty: u32, id: u32) -> std::result::Result<ParamKind, String> {
        let by_val = |m: &Module<'_>| {
            m.decorations
                .get(&id)
                .is_some_and(|d| d.param_attrs.contains(&FUNC_PARAM_ATTR_BY_VAL))
        };
        if let Some(scalar) = self.m.scalar_type(ty) {
            return Ok(ParamKind::Typed(scalar));
        }
        match self.m.types.get(&ty) {
            Some(Type::Pointer(STORAGE_CROSS_WORKGROUP | STORAGE_UNIFORM_CONSTANT, _)) => {
                Ok(ParamKind::Buffer)
            }
            Some(&Type::Pointer(STORAGE_FUNCTION, pointee)) if by_val(self.m) => {
                Ok(ParamKind::Scalar(self.size_align(pointee, 0)?.0))
            }
            _ => Ok(ParamKind::Scalar(self.size_align(ty, 0)?.0)),
        }
    }

    /// Size and alignment in bytes of type `ty` as OpenCL C lays it out.
    fn size_align(&mut self, ty: u32, depth: u32) -> std::result::Result<(usize, usize), String> {
        if depth > 16 {
            return Err("types nested more than 16 deep".into());
        }
        if let Some(&known) = self.sizes.get(&ty) {
            return Ok(known);
        }
        let too_big = || format!("type {ty} is too large");
        let m = self.m;
        let result = match m.types.get(&ty) {
            Some(Type::Int(w, _) | Type::Float(w)) if matches!(w, 8 | 16 | 32 | 64) => {
                let bytes = *w as usize / 8;
                (bytes, bytes)
            }
            Some(Type::Int(w, _) | Type::Float(w)) => {
                return Err(format!("a {w}-bit number has no size a host can pass"));
            }
            Some(&Type::Vector(component, n)) => {
                if !matches!(n, 2 | 3 | 4 | 8 | 16) {
                    return Err(format!("a vector of {n} components"));
                }
                let (c, _) = self.size_align(component, depth + 1)?;
                let size = c.checked_mul(if n == 3 { 4 } else { n as usize });
                let size = size.ok_or_else(too_big)?;
                (size, size)
            }
            Some(&Type::Array(element, length)) => {
                let len = match m.constant(length) {
                    Some(Constant::Scalar {
                        value,
                        high,
                        spec: false,
                    }) => (u64::from(high) << 32) | u64::from(value),
                    _ => return Err(format!("array {ty} has no constant length")),
                };
                let (elem, align) = self.size_align(element, depth + 1)?;
                let stride = match m.decorations.get(&ty).and_then(|d| d.array_stride) {
                    Some(s) => s as usize,
                    None => elem,
                };
                let len = usize::try_from(len).map_err(|_| too_big())?;
                (stride.checked_mul(len).ok_or_else(too_big)?, align)
            }
            Some(Type::Struct(members)) => {
                let packed = m.decorations.get(&ty).is_some_and(|d| d.packed);
                let (mut end, mut align) = (0usize, 1usize);
                for &member in members {
                    let (size, a) = self.size_align(member, depth + 1)?;
                    let a = if packed { 1 } else { a.max(1) };
                    end = end.checked_next_multiple_of(a).ok_or_else(too_big)?;
                    end = end.checked_add(size).ok_or_else(too_big)?;
                    align = align.max(a);
                }
                (
                    end.checked_next_multiple_of(align).ok_or_else(too_big)?,
                    align,
                )
            }
            // Physical64: every pointer is 8 bytes.
            Some(Type::Pointer(..)) => (8, 8),
            Some(Type::Bool) => return Err("a bool has no size a host can pass".into()),
            Some(Type::RuntimeArray) => return Err("a runtime array has no size".into()),
            Some(_) => return Err(format!("type {ty} has no size a host can pass")),
            None => return Err(format!("id {ty} is not a type")),
        };
        self.sizes.insert(ty, result);
        Ok(result)
    }
}
