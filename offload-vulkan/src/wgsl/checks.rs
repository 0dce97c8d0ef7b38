//! offload's bounds checks of WGSL kernels: a naga IR pass that guards every memory access
//! through an indexed pointer, and, when asked, records the first out-of-range access of a
//! launch where the host can read it (the *report*).
//!
//! # Protection
//!
//! Every load, store and atomic whose pointer indexes an array, vector or matrix (in a
//! storage or uniform buffer, workgroup memory, a private or a function variable) is
//! checked against the length (`arrayLength` for a runtime-sized array):
//!
//! * an out-of-range **load** of a scalar or vector gives zero (a `select`), of a struct or
//!   array zero too (the load runs only in range, into a zeroed temporary);
//! * an out-of-range **store** or **atomic** does not run (an `if`); an atomic's result is
//!   then zero.
//!
//! naga writes the module with its `Restrict` policy underneath (each index clamped into
//! its array), so memory stays inside the arrays even for what this pass does not guard:
//! indexing an array or vector held in a value (`let a = array(..); a[i]`) and
//! `workgroupUniformLoad` of an indexed pointer, where an out-of-range index reads an element
//! of the same array, as WGSL allows. naga's own `ReadZeroSkipWrite` does what this pass
//! does, but refuses every atomic on an indexed element ("Atomics out-of-bounds handling"
//! is unimplemented in naga 28), so kernels with `atomicAdd(&counts[i], 1u)` did not
//! compile at all.
//!
//! Guarding a load means giving its users another value, which naga's IR only allows
//! for an expression placed before them; so the pass rebuilds each function's expression
//! arena in order, with the checks inserted where they are needed ([`Rebuild`]).
//!
//! # Report
//!
//! With the report, each check of an access into a buffer of group 0 also counts a miss
//! in the invocation's record (local variables of the entry point, private ones in other
//! functions) and keeps what it was (binding, access, index, length), with `select`s. Where
//! the invocation leaves its entry point (each `return`) it looks at its count, and if it is
//! not zero adds it to the report's first word with one `atomicAdd`; the invocation that
//! finds that word zero writes what it kept:
//!
//! | word | holds |
//! |---|---|
//! | 0 | out-of-range accesses counted (atomic) |
//! | 1 | the entry point, as its index in the module ([`Plan::entries`]) |
//! | 2 | the binding of the buffer |
//! | 3 | the index (as `u32`: a negative `i32` index reads as a large one) |
//! | 4 | the array's length in elements |
//! | 5 | the access: 0 read, 1 write, 2 atomic |
//!
//! The report is one more storage buffer of group 0, at the binding after the module's
//! last ([`Plan::binding`]); reflection hides it from the kernel's parameters and the queue
//! binds a slot of its own memory there (`crate::bounds`).

use naga::valid::{FunctionInfo, ModuleInfo};
use naga::{
    AddressSpace, Arena, ArraySize, BinaryOperator, Block, Expression, Function, GlobalVariable,
    Handle, Literal, LocalVariable, Module, ResourceBinding, Scalar, ScalarKind, Span, Statement,
    StorageAccess, StructMember, Type, TypeInner, UniqueArena,
};

/// Words of the report, each a `u32`.
const REPORT_WORDS: u32 = 6;

/// What the report needs of the module: its binding (group 0) and the entry points by
/// the index the report gives them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) binding: u32,
    pub(crate) entries: Vec<String>,
}

/// The access a check guards, as word 5 of the report says it.
#[derive(Clone, Copy)]
enum Access {
    Read = 0,
    Write = 1,
    Atomic = 2,
}

/// How a step of a pointer chain is indexed (handles of the old arena).
#[derive(Clone, Copy)]
enum Index {
    Value(Handle<Expression>),
    Constant(u32),
}

/// One indexing on the way from a variable to the accessed element.
#[derive(Clone, Copy)]
struct Step {
    /// The pointer to the indexed array, vector or matrix (old arena).
    base: Handle<Expression>,
    index: Index,
    /// `None`: a runtime-sized array (`arrayLength`).
    length: Option<u32>,
}

/// The module-level objects of the report: the buffer, the private record of functions
/// other than entry points, and `u32`.
#[derive(Clone, Copy)]
struct ReportGlobals {
    report: Handle<GlobalVariable>,
    /// `[misses, binding | access << 16, index, length]`.
    record: [Handle<GlobalVariable>; 4],
    u32_ty: Handle<Type>,
}

/// Guards every indexed access of `module` (validated, as `info` says); with `report`,
/// adds the report at the binding after the module's last when one is free (at most
/// `max_binding`). Returns the report's plan when the module has one. An `Err` is a
/// statement this pass does not know (the validator's capabilities keep them out).
pub(crate) fn instrument(
    module: &mut Module,
    info: &ModuleInfo,
    report: bool,
    max_binding: u32,
) -> Result<Option<Plan>, String> {
    let binding = match module
        .global_variables
        .iter()
        .filter_map(|(_, g)| g.binding.as_ref())
        .filter(|b| b.group == 0)
        .map(|b| b.binding)
        .max()
    {
        Some(b) if b >= max_binding => None,
        Some(b) => Some(b + 1),
        None => Some(0),
    };
    let globals = match binding {
        Some(b) if report => Some(add_report_globals(module, b)),
        _ => None,
    };
    let Module {
        types,
        global_variables,
        functions,
        entry_points,
        ..
    } = module;
    // Other functions count their misses in the private record, which every entry point
    // then reads too.
    let mut helpers = false;
    for (handle, function) in functions.iter_mut() {
        let rebuilt = Rebuild::run(
            types,
            global_variables,
            &info[handle],
            function,
            globals,
            false,
        )?;
        helpers |= rebuilt.reported;
    }
    let mut reported = helpers;
    // Each entry point's own record (its local variables), for its exits.
    let mut records = Vec::with_capacity(entry_points.len());
    for (i, ep) in entry_points.iter_mut().enumerate() {
        let info = info.get_entry_point(i);
        let rebuilt = Rebuild::run(
            types,
            global_variables,
            info,
            &mut ep.function,
            globals,
            true,
        )?;
        reported |= rebuilt.reported;
        records.push(rebuilt.record);
    }
    let (Some(binding), Some(g), true) = (binding, globals, reported) else {
        // No report: its buffer stays unused (no entry point binds it).
        return Ok(None);
    };
    for (i, (ep, record)) in entry_points.iter_mut().zip(records).enumerate() {
        if let Some(own) = record {
            exits::add(&mut ep.function, g, own, i as u32, helpers);
        }
    }
    Ok(Some(Plan {
        binding,
        entries: entry_points.iter().map(|e| e.name.clone()).collect(),
    }))
}

/// The report's buffer and the private record.
fn add_report_globals(module: &mut Module, binding: u32) -> ReportGlobals {
    let u32_ty = module.types.insert(
        Type {
            name: None,
            inner: TypeInner::Scalar(Scalar::U32),
        },
        Span::UNDEFINED,
    );
    let atomic = module.types.insert(
        Type {
            name: None,
            inner: TypeInner::Atomic(Scalar::U32),
        },
        Span::UNDEFINED,
    );
    let names = ["count", "entry", "binding", "index", "length", "access"];
    let members = names
        .iter()
        .enumerate()
        .map(|(i, name)| StructMember {
            name: Some((*name).to_string()),
            ty: if i == 0 { atomic } else { u32_ty },
            binding: None,
            offset: 4 * i as u32,
        })
        .collect();
    let report_ty = module.types.insert(
        Type {
            name: Some("OffloadBoundsReport".to_string()),
            inner: TypeInner::Struct {
                members,
                span: 4 * REPORT_WORDS,
            },
        },
        Span::UNDEFINED,
    );
    let report = module.global_variables.append(
        GlobalVariable {
            name: Some("offload_bounds_report".to_string()),
            space: AddressSpace::Storage {
                access: StorageAccess::LOAD | StorageAccess::STORE,
            },
            binding: Some(ResourceBinding { group: 0, binding }),
            ty: report_ty,
            init: None,
        },
        Span::UNDEFINED,
    );
    let record = ["misses", "what", "index", "length"].map(|name| {
        module.global_variables.append(
            GlobalVariable {
                name: Some(format!("offload_bounds_{name}")),
                space: AddressSpace::Private,
                binding: None,
                ty: u32_ty,
                init: None,
            },
            Span::UNDEFINED,
        )
    });
    ReportGlobals {
        report,
        record,
        u32_ty,
    }
}

/// Appends `e` to `arena`, noting it in `run` (an expression an `Emit` must cover).
fn emit(
    arena: &mut Arena<Expression>,
    run: &mut Vec<Handle<Expression>>,
    e: Expression,
) -> Handle<Expression> {
    let h = arena.append(e, Span::UNDEFINED);
    run.push(h);
    h
}

/// One `Emit` of `run` (expressions appended one after another), pushed to `out`.
fn flush(arena: &Arena<Expression>, run: &mut Vec<Handle<Expression>>, out: &mut Block) {
    if let (Some(first), Some(last)) = (run.first(), run.last()) {
        let range =
            naga::Range::from_index_range(first.index() as u32..last.index() as u32 + 1, arena);
        out.push(Statement::Emit(range), Span::UNDEFINED);
    }
    run.clear();
}

fn literal(arena: &mut Arena<Expression>, v: u32) -> Handle<Expression> {
    arena.append(Expression::Literal(Literal::U32(v)), Span::UNDEFINED)
}

fn binary(op: BinaryOperator, left: Handle<Expression>, right: Handle<Expression>) -> Expression {
    Expression::Binary { op, left, right }
}

/// One function, rebuilt: a new expression arena in which every old expression keeps its
/// order, and the checks' expressions sit just before the access they guard.
struct Rebuild<'a> {
    types: &'a mut UniqueArena<Type>,
    globals: &'a Arena<GlobalVariable>,
    info: &'a FunctionInfo,
    old: Arena<Expression>,
    new: Arena<Expression>,
    /// Old handle → new handle (of the value users see).
    map: Vec<Option<Handle<Expression>>>,
    locals: &'a mut Arena<LocalVariable>,
    report: Option<ReportGlobals>,
    /// The record's pointers in the new arena (local variables in an entry point, the
    /// private ones elsewhere), made at the first reported check (or at the start of an
    /// entry point).
    record: Option<[Handle<Expression>; 4]>,
    /// Whether a check counted into the record.
    reported: bool,
}

/// What [`Rebuild::run`] made of a function.
struct Rebuilt {
    /// Whether a check counts misses into the record.
    reported: bool,
    /// The record's pointers in the function's new arena (an entry point's local
    /// variables, the private variables elsewhere), where it has one.
    record: Option<[Handle<Expression>; 4]>,
}

impl<'a> Rebuild<'a> {
    /// Rebuilds `function`.
    fn run(
        types: &'a mut UniqueArena<Type>,
        globals: &'a Arena<GlobalVariable>,
        info: &'a FunctionInfo,
        function: &'a mut Function,
        report: Option<ReportGlobals>,
        entry: bool,
    ) -> Result<Rebuilt, String> {
        let old = std::mem::take(&mut function.expressions);
        let body = std::mem::take(&mut function.body);
        // The function's own locals (the pass adds more, whose initialisers are new).
        let own_locals = function.local_variables.len();
        let mut pass = Rebuild {
            types,
            globals,
            info,
            map: vec![None; old.len()],
            new: Arena::new(),
            old,
            locals: &mut function.local_variables,
            report,
            record: None,
            reported: false,
        };
        pass.copy_unemitted(&body)?;
        if let (true, Some(g)) = (entry, report) {
            pass.record = Some(pass.entry_record(g));
        }
        let body = pass.block(body)?;
        let inits: Vec<Option<Handle<Expression>>> = pass
            .locals
            .iter()
            .take(own_locals)
            .map(|(_, v)| v.init.map(|i| pass.mapped(i)).transpose())
            .collect::<Result<_, _>>()?;
        for ((_, var), init) in pass.locals.iter_mut().zip(inits) {
            var.init = init;
        }
        let named = std::mem::take(&mut function.named_expressions);
        for (h, name) in named {
            if let Some(Some(n)) = pass.map.get(h.index()) {
                function.named_expressions.insert(*n, name);
            }
        }
        let rebuilt = Rebuilt {
            reported: pass.reported,
            record: pass.record,
        };
        function.expressions = pass.new;
        function.body = body;
        Ok(rebuilt)
    }

    fn mapped(&self, old: Handle<Expression>) -> Result<Handle<Expression>, String> {
        self.map
            .get(old.index())
            .copied()
            .flatten()
            .ok_or_else(|| format!("expression {old:?} is used before it is made"))
    }

    /// Copies, in order, every expression no `Emit` covers (constants, variables,
    /// arguments, literals and statement results): they stay valid everywhere.
    fn copy_unemitted(&mut self, body: &Block) -> Result<(), String> {
        let mut emitted = vec![false; self.old.len()];
        mark_emitted(body, &mut emitted);
        let handles: Vec<Handle<Expression>> = self.old.iter().map(|(h, _)| h).collect();
        for h in handles {
            if emitted[h.index()] {
                continue;
            }
            let copy = self.remap(&self.old[h])?;
            let span = self.old.get_span(h);
            self.map[h.index()] = Some(self.new.append(copy, span));
        }
        Ok(())
    }

    /// The entry point's record: four local variables, zero at its start.
    fn entry_record(&mut self, g: ReportGlobals) -> [Handle<Expression>; 4] {
        let zero = literal(&mut self.new, 0);
        ["misses", "what", "index", "length"].map(|name| {
            let var = self.locals.append(
                LocalVariable {
                    name: Some(format!("offload_bounds_{name}")),
                    ty: g.u32_ty,
                    init: Some(zero),
                },
                Span::UNDEFINED,
            );
            self.new
                .append(Expression::LocalVariable(var), Span::UNDEFINED)
        })
    }

    /// `e` with its operands mapped to the new arena.
    fn remap(&self, e: &Expression) -> Result<Expression, String> {
        let m = |h: Handle<Expression>| self.mapped(h);
        let o = |h: Option<Handle<Expression>>| h.map(|h| self.mapped(h)).transpose();
        use Expression as E;
        Ok(match *e {
            E::Literal(_)
            | E::Constant(_)
            | E::Override(_)
            | E::ZeroValue(_)
            | E::FunctionArgument(_)
            | E::GlobalVariable(_)
            | E::LocalVariable(_)
            | E::CallResult(_)
            | E::AtomicResult { .. }
            | E::WorkGroupUniformLoadResult { .. }
            | E::RayQueryProceedResult
            | E::SubgroupBallotResult
            | E::SubgroupOperationResult { .. } => e.clone(),
            E::Compose { ty, ref components } => E::Compose {
                ty,
                components: components.iter().map(|&c| m(c)).collect::<Result<_, _>>()?,
            },
            E::Access { base, index } => E::Access {
                base: m(base)?,
                index: m(index)?,
            },
            E::AccessIndex { base, index } => E::AccessIndex {
                base: m(base)?,
                index,
            },
            E::Splat { size, value } => E::Splat {
                size,
                value: m(value)?,
            },
            E::Swizzle {
                size,
                vector,
                pattern,
            } => E::Swizzle {
                size,
                vector: m(vector)?,
                pattern,
            },
            E::Load { pointer } => E::Load {
                pointer: m(pointer)?,
            },
            E::ImageSample {
                image,
                sampler,
                gather,
                coordinate,
                array_index,
                offset,
                level,
                depth_ref,
                clamp_to_edge,
            } => E::ImageSample {
                image: m(image)?,
                sampler: m(sampler)?,
                gather,
                coordinate: m(coordinate)?,
                array_index: o(array_index)?,
                offset: o(offset)?,
                level: match level {
                    naga::SampleLevel::Exact(x) => naga::SampleLevel::Exact(m(x)?),
                    naga::SampleLevel::Bias(x) => naga::SampleLevel::Bias(m(x)?),
                    naga::SampleLevel::Gradient { x, y } => {
                        naga::SampleLevel::Gradient { x: m(x)?, y: m(y)? }
                    }
                    other => other,
                },
                depth_ref: o(depth_ref)?,
                clamp_to_edge,
            },
            E::ImageLoad {
                image,
                coordinate,
                array_index,
                sample,
                level,
            } => E::ImageLoad {
                image: m(image)?,
                coordinate: m(coordinate)?,
                array_index: o(array_index)?,
                sample: o(sample)?,
                level: o(level)?,
            },
            E::ImageQuery { image, query } => E::ImageQuery {
                image: m(image)?,
                query: match query {
                    naga::ImageQuery::Size { level } => naga::ImageQuery::Size { level: o(level)? },
                    other => other,
                },
            },
            E::Unary { op, expr } => E::Unary { op, expr: m(expr)? },
            E::Binary { op, left, right } => E::Binary {
                op,
                left: m(left)?,
                right: m(right)?,
            },
            E::Select {
                condition,
                accept,
                reject,
            } => E::Select {
                condition: m(condition)?,
                accept: m(accept)?,
                reject: m(reject)?,
            },
            E::Derivative { axis, ctrl, expr } => E::Derivative {
                axis,
                ctrl,
                expr: m(expr)?,
            },
            E::Relational { fun, argument } => E::Relational {
                fun,
                argument: m(argument)?,
            },
            E::Math {
                fun,
                arg,
                arg1,
                arg2,
                arg3,
            } => E::Math {
                fun,
                arg: m(arg)?,
                arg1: o(arg1)?,
                arg2: o(arg2)?,
                arg3: o(arg3)?,
            },
            E::As {
                expr,
                kind,
                convert,
            } => E::As {
                expr: m(expr)?,
                kind,
                convert,
            },
            E::ArrayLength(x) => E::ArrayLength(m(x)?),
            E::RayQueryVertexPositions { query, committed } => E::RayQueryVertexPositions {
                query: m(query)?,
                committed,
            },
            E::RayQueryGetIntersection { query, committed } => E::RayQueryGetIntersection {
                query: m(query)?,
                committed,
            },
        })
    }

    /// The steps of the pointer chain at `pointer` (old arena) that index an array,
    /// vector or matrix, outermost first, and the buffer binding it starts from (when it
    /// starts from a storage or uniform buffer of group 0).
    fn steps(&self, pointer: Handle<Expression>) -> (Vec<Step>, Option<u32>) {
        let mut steps = Vec::new();
        let mut e = pointer;
        let binding = loop {
            let (base, index) = match self.old[e] {
                Expression::Access { base, index } => (base, Index::Value(index)),
                Expression::AccessIndex { base, index } => (base, Index::Constant(index)),
                Expression::GlobalVariable(g) => {
                    let gv = &self.globals[g];
                    let buffer = matches!(
                        gv.space,
                        AddressSpace::Storage { .. } | AddressSpace::Uniform
                    );
                    break gv
                        .binding
                        .as_ref()
                        .filter(|b| buffer && b.group == 0)
                        .map(|b| b.binding);
                }
                _ => break None,
            };
            let base_ty = self.info[base].ty.inner_with(self.types);
            let length = match *base_ty {
                TypeInner::Pointer { base: pointee, .. } => match self.types[pointee].inner {
                    TypeInner::Array { size, .. } => match size {
                        ArraySize::Dynamic => Some(None),
                        ArraySize::Constant(n) => Some(Some(n.get())),
                        ArraySize::Pending(_) => None,
                    },
                    TypeInner::Vector { size, .. } => Some(Some(size as u32)),
                    TypeInner::Matrix { columns, .. } => Some(Some(columns as u32)),
                    _ => None, // a struct member
                },
                TypeInner::ValuePointer {
                    size: Some(size), ..
                } => Some(Some(size as u32)),
                _ => None,
            };
            if let Some(length) = length {
                // A constant index into a fixed-size array, vector or matrix is checked by
                // naga's validator.
                let known = matches!((index, length), (Index::Constant(_), Some(_)));
                if !known {
                    steps.push(Step {
                        base,
                        index,
                        length,
                    });
                }
            }
            e = base;
        };
        steps.reverse();
        (steps, binding)
    }

    fn is_signed(&self, e: Handle<Expression>) -> bool {
        matches!(
            self.info[e].ty.inner_with(self.types).scalar_kind(),
            Some(ScalarKind::Sint)
        )
    }

    /// The record's pointers of this function (made at its first use outside an entry
    /// point: the private variables).
    fn record(&mut self, g: ReportGlobals) -> [Handle<Expression>; 4] {
        if let Some(r) = self.record {
            return r;
        }
        let r = g.record.map(|v| {
            self.new
                .append(Expression::GlobalVariable(v), Span::UNDEFINED)
        });
        self.record = Some(r);
        r
    }

    /// Emits the checks of an access through `pointer` (old arena) into `out`: the
    /// condition "some index is out of range" (new arena; `None` when nothing is
    /// indexed), after recording the miss in the record where the access is reported.
    fn checks(
        &mut self,
        pointer: Handle<Expression>,
        access: Access,
        out: &mut Block,
    ) -> Result<Option<Handle<Expression>>, String> {
        let (steps, binding) = self.steps(pointer);
        if steps.is_empty() {
            return Ok(None);
        }
        // Literals first: no `Emit` covers them (they stay valid everywhere). The record's
        // (zero, one, what the access is) only where the access is reported.
        let report = match (self.report, binding) {
            (Some(g), Some(binding)) => Some((
                self.record(g),
                literal(&mut self.new, 0),
                literal(&mut self.new, 1),
                literal(&mut self.new, binding | (access as u32) << 16),
            )),
            _ => None,
        };
        let mut lits = Vec::with_capacity(steps.len());
        for step in &steps {
            let index = match step.index {
                Index::Constant(k) => Some(literal(&mut self.new, k)),
                Index::Value(_) => None,
            };
            let length = step.length.map(|n| literal(&mut self.new, n));
            lits.push((index, length));
        }
        let mut run = Vec::new();
        let mut outside = None;
        let mut first = None::<(Handle<Expression>, Handle<Expression>)>;
        for (step, (index_lit, length_lit)) in steps.iter().zip(lits) {
            let index = match (step.index, index_lit) {
                (_, Some(l)) => l,
                (Index::Value(v), None) => {
                    let mapped = self.mapped(v)?;
                    if self.is_signed(v) {
                        let cast = Expression::As {
                            expr: mapped,
                            kind: ScalarKind::Uint,
                            convert: None,
                        };
                        emit(&mut self.new, &mut run, cast)
                    } else {
                        mapped
                    }
                }
                (Index::Constant(_), None) => return Err("a constant index lost".into()),
            };
            let length = match length_lit {
                Some(l) => l,
                None => {
                    let base = self.mapped(step.base)?;
                    emit(&mut self.new, &mut run, Expression::ArrayLength(base))
                }
            };
            let out_k = emit(
                &mut self.new,
                &mut run,
                binary(BinaryOperator::GreaterEqual, index, length),
            );
            outside = Some(match outside {
                None => out_k,
                Some(o) => emit(
                    &mut self.new,
                    &mut run,
                    binary(BinaryOperator::LogicalOr, o, out_k),
                ),
            });
            // The record keeps the last step out of range of the invocation's last miss.
            first = Some(match first {
                None => (index, length),
                Some((i, l)) => {
                    let pick = |new: &mut Arena<Expression>, run: &mut Vec<_>, a, b| {
                        let s = Expression::Select {
                            condition: out_k,
                            accept: a,
                            reject: b,
                        };
                        emit(new, run, s)
                    };
                    (
                        pick(&mut self.new, &mut run, index, i),
                        pick(&mut self.new, &mut run, length, l),
                    )
                }
            });
        }
        let (Some(outside), Some((index, length))) = (outside, first) else {
            return Ok(None);
        };
        if let Some(([misses, kept_what, kept_index, kept_length], zero, one, what)) = report {
            self.reported = true;
            let mut stores = Vec::new();
            for (var, value) in [
                (kept_what, what),
                (kept_index, index),
                (kept_length, length),
            ] {
                let old = emit(&mut self.new, &mut run, Expression::Load { pointer: var });
                let keep = Expression::Select {
                    condition: outside,
                    accept: value,
                    reject: old,
                };
                stores.push((var, emit(&mut self.new, &mut run, keep)));
            }
            let count = emit(
                &mut self.new,
                &mut run,
                Expression::Load { pointer: misses },
            );
            let add = Expression::Select {
                condition: outside,
                accept: one,
                reject: zero,
            };
            let add = emit(&mut self.new, &mut run, add);
            let counted = emit(
                &mut self.new,
                &mut run,
                binary(BinaryOperator::Add, count, add),
            );
            stores.push((misses, counted));
            flush(&self.new, &mut run, out);
            for (pointer, value) in stores {
                out.push(Statement::Store { pointer, value }, Span::UNDEFINED);
            }
        } else {
            flush(&self.new, &mut run, out);
        }
        Ok(Some(outside))
    }

    /// A type handle for the type of old expression `e`.
    fn type_of(&mut self, e: Handle<Expression>) -> Handle<Type> {
        match self.info[e].ty {
            naga::proc::TypeResolution::Handle(t) => t,
            naga::proc::TypeResolution::Value(ref inner) => {
                let inner = inner.clone();
                self.types
                    .insert(Type { name: None, inner }, Span::UNDEFINED)
            }
        }
    }

    /// A zeroed temporary of type `ty`: its pointer (new arena); `out` gets the store
    /// of zero.
    fn temporary(&mut self, ty: Handle<Type>, out: &mut Block) -> Handle<Expression> {
        let zero = self.new.append(Expression::ZeroValue(ty), Span::UNDEFINED);
        let var = self.locals.append(
            LocalVariable {
                name: Some("offload_bounds_temporary".to_string()),
                ty,
                init: None,
            },
            Span::UNDEFINED,
        );
        let pointer = self
            .new
            .append(Expression::LocalVariable(var), Span::UNDEFINED);
        out.push(
            Statement::Store {
                pointer,
                value: zero,
            },
            Span::UNDEFINED,
        );
        pointer
    }

    /// `if !outside { then }`.
    fn guarded(&mut self, outside: Handle<Expression>, then: Block, out: &mut Block) {
        let mut run = Vec::new();
        let inside = emit(
            &mut self.new,
            &mut run,
            Expression::Unary {
                op: naga::UnaryOperator::LogicalNot,
                expr: outside,
            },
        );
        flush(&self.new, &mut run, out);
        out.push(
            Statement::If {
                condition: inside,
                accept: then,
                reject: Block::new(),
            },
            Span::UNDEFINED,
        );
    }

    /// The `Emit` of old range `range`, with the loads through indexed pointers guarded.
    fn emit_range(
        &mut self,
        range: naga::Range<Expression>,
        out: &mut Block,
    ) -> Result<(), String> {
        let mut run = Vec::new();
        for h in range {
            let e = self.old[h].clone();
            if let Expression::Load { pointer } = e {
                let (steps, _) = self.steps(pointer);
                if !steps.is_empty() {
                    flush(&self.new, &mut run, out);
                    self.guarded_load(h, pointer, out)?;
                    continue;
                }
            }
            let copy = self.remap(&e)?;
            self.map[h.index()] = Some(emit(&mut self.new, &mut run, copy));
        }
        flush(&self.new, &mut run, out);
        Ok(())
    }

    /// Load `h` through `pointer`, which indexes something: zero where out of range.
    fn guarded_load(
        &mut self,
        h: Handle<Expression>,
        pointer: Handle<Expression>,
        out: &mut Block,
    ) -> Result<(), String> {
        let Some(outside) = self.checks(pointer, Access::Read, out)? else {
            return Err("a checked load lost its checks".into());
        };
        let ty = self.type_of(h);
        let pointer = self.mapped(pointer)?;
        let simple = matches!(
            self.types[ty].inner,
            TypeInner::Scalar(_) | TypeInner::Vector { .. }
        );
        let mut run = Vec::new();
        if simple {
            let zero = self.new.append(Expression::ZeroValue(ty), Span::UNDEFINED);
            let loaded = emit(&mut self.new, &mut run, Expression::Load { pointer });
            let value = Expression::Select {
                condition: outside,
                accept: zero,
                reject: loaded,
            };
            self.map[h.index()] = Some(emit(&mut self.new, &mut run, value));
            flush(&self.new, &mut run, out);
            return Ok(());
        }
        // A struct or array: loaded only in range, into a zeroed temporary.
        let temporary = self.temporary(ty, out);
        let mut then = Block::new();
        let loaded = emit(&mut self.new, &mut run, Expression::Load { pointer });
        flush(&self.new, &mut run, &mut then);
        then.push(
            Statement::Store {
                pointer: temporary,
                value: loaded,
            },
            Span::UNDEFINED,
        );
        self.guarded(outside, then, out);
        let value = emit(
            &mut self.new,
            &mut run,
            Expression::Load { pointer: temporary },
        );
        flush(&self.new, &mut run, out);
        self.map[h.index()] = Some(value);
        Ok(())
    }

    fn block(&mut self, block: Block) -> Result<Block, String> {
        let mut out = Block::with_capacity(block.len());
        for (statement, span) in block.span_into_iter() {
            self.statement(statement, span, &mut out)?;
        }
        Ok(out)
    }

    fn statement(&mut self, s: Statement, span: Span, out: &mut Block) -> Result<(), String> {
        let m = |this: &Self, h: Handle<Expression>| this.mapped(h);
        let o = |this: &Self, h: Option<Handle<Expression>>| h.map(|h| this.mapped(h)).transpose();
        use Statement as S;
        let s = match s {
            S::Emit(range) => return self.emit_range(range, out),
            S::Block(b) => S::Block(self.block(b)?),
            S::If {
                condition,
                accept,
                reject,
            } => S::If {
                condition: m(self, condition)?,
                accept: self.block(accept)?,
                reject: self.block(reject)?,
            },
            S::Switch { selector, cases } => {
                let selector = m(self, selector)?;
                let mut new_cases = Vec::with_capacity(cases.len());
                for mut c in cases {
                    c.body = self.block(std::mem::take(&mut c.body))?;
                    new_cases.push(c);
                }
                S::Switch {
                    selector,
                    cases: new_cases,
                }
            }
            S::Loop {
                body,
                continuing,
                break_if,
            } => {
                let body = self.block(body)?;
                let continuing = self.block(continuing)?;
                S::Loop {
                    body,
                    continuing,
                    break_if: o(self, break_if)?,
                }
            }
            S::Return { value } => S::Return {
                value: o(self, value)?,
            },
            S::Store { pointer, value } => {
                let outside = self.checks(pointer, Access::Write, out)?;
                let store = S::Store {
                    pointer: m(self, pointer)?,
                    value: m(self, value)?,
                };
                match outside {
                    None => store,
                    Some(outside) => {
                        let mut then = Block::new();
                        then.push(store, span);
                        self.guarded(outside, then, out);
                        return Ok(());
                    }
                }
            }
            S::Atomic {
                pointer,
                fun,
                value,
                result,
            } => {
                let outside = self.checks(pointer, Access::Atomic, out)?;
                let fun = match fun {
                    naga::AtomicFunction::Exchange { compare } => naga::AtomicFunction::Exchange {
                        compare: o(self, compare)?,
                    },
                    other => other,
                };
                let (pointer, value) = (m(self, pointer)?, m(self, value)?);
                let atomic = |result| S::Atomic {
                    pointer,
                    fun,
                    value,
                    result,
                };
                match (outside, result) {
                    (None, _) => atomic(o(self, result)?),
                    (Some(outside), None) => {
                        let mut then = Block::new();
                        then.push(atomic(None), span);
                        self.guarded(outside, then, out);
                        return Ok(());
                    }
                    (Some(outside), Some(result)) => {
                        // The result is used after the atomic: it goes through a zeroed
                        // temporary, read after the `if`.
                        let ty = self.type_of(result);
                        let temporary = self.temporary(ty, out);
                        let produced = self.mapped(result)?;
                        let mut then = Block::new();
                        then.push(atomic(Some(produced)), span);
                        then.push(
                            S::Store {
                                pointer: temporary,
                                value: produced,
                            },
                            Span::UNDEFINED,
                        );
                        self.guarded(outside, then, out);
                        let mut run = Vec::new();
                        let value = emit(
                            &mut self.new,
                            &mut run,
                            Expression::Load { pointer: temporary },
                        );
                        flush(&self.new, &mut run, out);
                        self.map[result.index()] = Some(value);
                        return Ok(());
                    }
                }
            }
            S::WorkGroupUniformLoad { pointer, result } => S::WorkGroupUniformLoad {
                pointer: m(self, pointer)?,
                result: m(self, result)?,
            },
            S::Call {
                function,
                arguments,
                result,
            } => S::Call {
                function,
                arguments: arguments
                    .into_iter()
                    .map(|a| m(self, a))
                    .collect::<Result<_, _>>()?,
                result: o(self, result)?,
            },
            S::ImageStore {
                image,
                coordinate,
                array_index,
                value,
            } => S::ImageStore {
                image: m(self, image)?,
                coordinate: m(self, coordinate)?,
                array_index: o(self, array_index)?,
                value: m(self, value)?,
            },
            S::ImageAtomic {
                image,
                coordinate,
                array_index,
                fun,
                value,
            } => S::ImageAtomic {
                image: m(self, image)?,
                coordinate: m(self, coordinate)?,
                array_index: o(self, array_index)?,
                fun: match fun {
                    naga::AtomicFunction::Exchange { compare } => naga::AtomicFunction::Exchange {
                        compare: o(self, compare)?,
                    },
                    other => other,
                },
                value: m(self, value)?,
            },
            s @ (S::Break | S::Continue | S::Kill | S::ControlBarrier(_) | S::MemoryBarrier(_)) => {
                s
            }
            S::RayQuery { .. }
            | S::SubgroupBallot { .. }
            | S::SubgroupGather { .. }
            | S::SubgroupCollectiveOperation { .. } => {
                return Err("ray queries and subgroup operations are not checked".into());
            }
        };
        out.push(s, span);
        Ok(())
    }
}

/// Marks the old expressions an `Emit` of `block` (at any depth) covers.
fn mark_emitted(block: &Block, emitted: &mut [bool]) {
    for s in block.iter() {
        match s {
            Statement::Emit(range) => {
                for h in range.clone() {
                    if let Some(e) = emitted.get_mut(h.index()) {
                        *e = true;
                    }
                }
            }
            Statement::Block(b) => mark_emitted(b, emitted),
            Statement::If { accept, reject, .. } => {
                mark_emitted(accept, emitted);
                mark_emitted(reject, emitted);
            }
            Statement::Switch { cases, .. } => {
                for c in cases {
                    mark_emitted(&c.body, emitted);
                }
            }
            Statement::Loop {
                body, continuing, ..
            } => {
                mark_emitted(body, emitted);
                mark_emitted(continuing, emitted);
            }
            _ => {}
        }
    }
}

/// The report at an entry point's exits.
mod exits {
    use super::*;

    /// Makes entry point `index` hand its record (`own`: the pointers to the local
    /// variables the rebuild made) to the report at every `return` (naga ends every body
    /// with one); with `helpers` the private record starts empty and is added in.
    pub(super) fn add(
        function: &mut Function,
        g: ReportGlobals,
        own: [Handle<Expression>; 4],
        index: u32,
        helpers: bool,
    ) {
        let exprs = &mut function.expressions;
        let mut body = Block::with_capacity(function.body.len() + 4);
        let privates = helpers.then(|| {
            g.record
                .map(|v| exprs.append(Expression::GlobalVariable(v), Span::UNDEFINED))
        });
        if let Some(privates) = privates {
            let zero = literal(exprs, 0);
            for var in privates {
                body.push(
                    Statement::Store {
                        pointer: var,
                        value: zero,
                    },
                    Span::UNDEFINED,
                );
            }
        }
        let at = Exit {
            g,
            entry: index,
            own,
            privates,
        };
        let old = std::mem::take(&mut function.body);
        let mut rest = at.block(old, exprs);
        if !matches!(rest.last(), Some(Statement::Return { .. })) {
            rest.push(Statement::Block(at.report(exprs)), Span::UNDEFINED);
        }
        body.append(&mut rest);
        function.body = body;
    }

    struct Exit {
        g: ReportGlobals,
        entry: u32,
        own: [Handle<Expression>; 4],
        privates: Option<[Handle<Expression>; 4]>,
    }

    impl Exit {
        /// `block` with the report in front of each `return`.
        fn block(&self, block: Block, exprs: &mut Arena<Expression>) -> Block {
            let mut out = Block::with_capacity(block.len());
            for (statement, span) in block.span_into_iter() {
                let statement = match statement {
                    Statement::Return { value } => {
                        out.push(Statement::Block(self.report(exprs)), span);
                        Statement::Return { value }
                    }
                    Statement::Block(b) => Statement::Block(self.block(b, exprs)),
                    Statement::If {
                        condition,
                        accept,
                        reject,
                    } => Statement::If {
                        condition,
                        accept: self.block(accept, exprs),
                        reject: self.block(reject, exprs),
                    },
                    Statement::Switch { selector, cases } => Statement::Switch {
                        selector,
                        cases: cases
                            .into_iter()
                            .map(|mut c| {
                                c.body = self.block(std::mem::take(&mut c.body), exprs);
                                c
                            })
                            .collect(),
                    },
                    Statement::Loop {
                        body,
                        continuing,
                        break_if,
                    } => Statement::Loop {
                        body: self.block(body, exprs),
                        continuing,
                        break_if,
                    },
                    other => other,
                };
                out.push(statement, span);
            }
            out
        }

        /// `if misses != 0u { if atomicAdd(&report.count, misses) == 0u { report.entry =
        /// ..; .. } }`: the invocation's record handed to the report.
        fn report(&self, exprs: &mut Arena<Expression>) -> Block {
            let report = exprs.append(Expression::GlobalVariable(self.g.report), Span::UNDEFINED);
            let zero = literal(exprs, 0);
            let entry = literal(exprs, self.entry);
            let low = literal(exprs, 0xffff);
            let sixteen = literal(exprs, 16);
            let mut outer = Block::new();
            let mut e = Vec::new();
            let loaded = self
                .own
                .map(|pointer| emit(exprs, &mut e, Expression::Load { pointer }));
            // The private record (other functions' misses) where there is one: its count
            // adds in, and it is kept where the entry point's own record is empty.
            let [count, what, index, length] = match self.privates {
                None => loaded,
                Some(privates) => {
                    let other =
                        privates.map(|pointer| emit(exprs, &mut e, Expression::Load { pointer }));
                    let own = emit(
                        exprs,
                        &mut e,
                        binary(BinaryOperator::NotEqual, loaded[0], zero),
                    );
                    let total = emit(
                        exprs,
                        &mut e,
                        binary(BinaryOperator::Add, loaded[0], other[0]),
                    );
                    let mut pick = |k: usize| {
                        let choice = Expression::Select {
                            condition: own,
                            accept: loaded[k],
                            reject: other[k],
                        };
                        emit(exprs, &mut e, choice)
                    };
                    [total, pick(1), pick(2), pick(3)]
                }
            };
            let missed = emit(exprs, &mut e, binary(BinaryOperator::NotEqual, count, zero));
            flush(exprs, &mut e, &mut outer);
            let mut block = Block::new();
            let counter = emit(
                exprs,
                &mut e,
                Expression::AccessIndex {
                    base: report,
                    index: 0,
                },
            );
            flush(exprs, &mut e, &mut block);
            let old = exprs.append(
                Expression::AtomicResult {
                    ty: self.g.u32_ty,
                    comparison: false,
                },
                Span::UNDEFINED,
            );
            block.push(
                Statement::Atomic {
                    pointer: counter,
                    fun: naga::AtomicFunction::Add,
                    value: count,
                    result: Some(old),
                },
                Span::UNDEFINED,
            );
            let first = emit(exprs, &mut e, binary(BinaryOperator::Equal, old, zero));
            let binding = emit(exprs, &mut e, binary(BinaryOperator::And, what, low));
            let access = emit(
                exprs,
                &mut e,
                binary(BinaryOperator::ShiftRight, what, sixteen),
            );
            let fields = [entry, binding, index, length, access];
            let pointers: Vec<Handle<Expression>> = (1..=fields.len() as u32)
                .map(|k| {
                    let at = Expression::AccessIndex {
                        base: report,
                        index: k,
                    };
                    emit(exprs, &mut e, at)
                })
                .collect();
            flush(exprs, &mut e, &mut block);
            let mut writes = Block::new();
            for (pointer, value) in pointers.into_iter().zip(fields) {
                writes.push(Statement::Store { pointer, value }, Span::UNDEFINED);
            }
            block.push(
                Statement::If {
                    condition: first,
                    accept: writes,
                    reject: Block::new(),
                },
                Span::UNDEFINED,
            );
            outer.push(
                Statement::If {
                    condition: missed,
                    accept: block,
                    reject: Block::new(),
                },
                Span::UNDEFINED,
            );
            outer
        }
    }
}
