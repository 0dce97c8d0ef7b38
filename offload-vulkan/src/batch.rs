//! One submission of a queue: a command buffer with what its commands need until the
//! device has run them — descriptor pools, staging memory for queued writes, the modules
//! whose pipelines it binds, the events' timestamp queries it writes ([`Query`], declared
//! here), and buffers freed while it was held behind a host function (queue/gate.rs). A batch is
//! reused once the timeline has passed the value its last submission signalled;
//! [`Batch::recycle`] lets go of what that submission held.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use ash::vk;
use offload_core::Result;

use crate::allocation::RawAllocation;
use crate::bounds::{Described, Found, Reports};
use crate::context::DeviceContext;
use crate::error::{At, map_vk_err};
use crate::program::ModuleInner;
use crate::usage::Released;

/// Descriptor sets one pool holds, and descriptors of each type (storage and uniform
/// buffers).
const POOL_SETS: u32 = 64;
const POOL_DESCRIPTORS: u32 = 512;

/// A descriptor pool and what is left in it.
#[derive(Debug)]
struct Pool {
    raw: vk::DescriptorPool,
    sets_left: u32,
    /// Storage- and uniform-buffer descriptors left.
    descriptors_left: [u32; 2],
    /// Descriptors of each type it was made with (a launch with more bindings gets a
    /// pool of its own).
    descriptors: [u32; 2],
}

/// The compute state the command buffer being recorded has bound, so that a launch like
/// the one before it records only its dispatch (on lavapipe each bind, push and descriptor
/// set costs more host time than the dispatch itself). Forgotten when recording begins.
#[derive(Debug, Default)]
pub(crate) struct Bound {
    /// The compute pipeline bound; null: none.
    pub(crate) pipeline: vk::Pipeline,
    /// The descriptor set bound (at set 0, with the pipeline's layout) since the pipeline
    /// was; null: none.
    pub(crate) set: vk::DescriptorSet,
    /// The push-constant bytes pushed (from offset 0) since the pipeline was bound; `None`:
    /// none.
    pub(crate) push: Option<Vec<u8>>,
}

impl Bound {
    /// Notes that `pipeline` is bound: sets and push constants bound before are no longer
    /// counted on (a pipeline with another layout may disturb them).
    pub(crate) fn pipeline(&mut self, pipeline: vk::Pipeline) {
        self.pipeline = pipeline;
        self.set = vk::DescriptorSet::null();
        self.push = None;
    }
}

/// The last descriptor set written, and what it describes.
#[derive(Debug)]
struct Written {
    layout: vk::DescriptorSetLayout,
    described: Vec<Described>,
    set: vk::DescriptorSet,
}

/// A command buffer and what its recorded commands use.
#[derive(Debug)]
pub(crate) struct Batch {
    pub(crate) commands: vk::CommandBuffer,
    pools: Vec<Pool>,
    /// Staging memory of queued writes, freed when the batch is recycled.
    staging: Vec<RawAllocation>,
    /// Modules whose pipelines the commands bind.
    modules: Vec<Arc<ModuleInner>>,
    /// Timestamp queries the commands write.
    queries: Vec<Arc<Query>>,
    /// Buffers freed behind the gate, destroyed once the batch has run.
    released: Vec<Released>,
    /// The timeline value its last submission signals.
    pub(crate) value: u64,
    /// The last descriptor set allocated from the batch's pools and written: a launch of the
    /// same layout with the same bindings uses it again (a set is written once, before its
    /// first use, and never again, so it may be bound any number of times).
    written: Option<Written>,
    /// What the command buffer has bound (see [`Bound`]).
    pub(crate) bound: Bound,
    /// Where its launches record out-of-range accesses (`crate::bounds`).
    pub(crate) reports: Reports,
}

// SAFETY: the only non-`Send` members are the staging allocations' mapped pointers, which
// point into memory the batch owns; they were written once, before the copy out of them
// was recorded, and are never used again (only the allocation is freed, by its owner).
unsafe impl Send for Batch {}

impl Batch {
    pub(crate) fn new(commands: vk::CommandBuffer) -> Batch {
        Batch {
            commands,
            pools: Vec::new(),
            staging: Vec::new(),
            modules: Vec::new(),
            queries: Vec::new(),
            released: Vec::new(),
            value: 0,
            written: None,
            bound: Bound::default(),
            reports: Reports::default(),
        }
    }

    /// A descriptor set of `layout` written earlier in this batch whose bindings are
    /// exactly `described`.
    pub(crate) fn written_set(
        &self,
        layout: vk::DescriptorSetLayout,
        described: impl Iterator<Item = Described>,
    ) -> Option<vk::DescriptorSet> {
        let w = self.written.as_ref()?;
        let same = w.layout == layout && w.described.iter().copied().eq(described);
        same.then_some(w.set)
    }

    /// Notes that `set` (of `layout`, from this batch's pools) was written with `described`.
    pub(crate) fn wrote_set(
        &mut self,
        layout: vk::DescriptorSetLayout,
        described: impl Iterator<Item = Described>,
        set: vk::DescriptorSet,
    ) {
        let w = self.written.get_or_insert_with(|| Written {
            layout,
            described: Vec::new(),
            set,
        });
        w.layout = layout;
        w.set = set;
        w.described.clear();
        w.described.extend(described);
    }

    /// Keeps `module` alive until the batch has run.
    pub(crate) fn hold(&mut self, module: &Arc<ModuleInner>) {
        if !self.modules.iter().any(|m| Arc::ptr_eq(m, module)) {
            self.modules.push(module.clone());
        }
    }

    /// Keeps `query` until the batch has run.
    pub(crate) fn hold_query(&mut self, query: &Arc<Query>) {
        self.queries.push(query.clone());
    }

    /// Keeps `released` until the batch has run, then destroys it.
    pub(crate) fn hold_released(&mut self, released: Released) {
        self.released.push(released);
    }

    /// Keeps `staging` until the batch has run, then frees it.
    pub(crate) fn hold_staging(&mut self, staging: RawAllocation) {
        self.staging.push(staging);
    }

    /// A descriptor set of `layout` for `count` storage and uniform buffers (in that
    /// order).
    pub(crate) fn descriptor_set(
        &mut self,
        device: &DeviceContext,
        layout: vk::DescriptorSetLayout,
        count: [u32; 2],
    ) -> Result<vk::DescriptorSet> {
        let dev = &device.raw;
        let fits = |p: &Pool| {
            p.sets_left > 0
                && p.descriptors_left[0] >= count[0]
                && p.descriptors_left[1] >= count[1]
        };
        let index = match self.pools.iter().position(fits) {
            Some(i) => i,
            None => {
                let descriptors = count.map(|c| POOL_DESCRIPTORS.max(c));
                let sizes = [
                    vk::DescriptorPoolSize::default()
                        .ty(vk::DescriptorType::STORAGE_BUFFER)
                        .descriptor_count(descriptors[0]),
                    vk::DescriptorPoolSize::default()
                        .ty(vk::DescriptorType::UNIFORM_BUFFER)
                        .descriptor_count(descriptors[1]),
                ];
                let info = vk::DescriptorPoolCreateInfo::default()
                    .max_sets(POOL_SETS)
                    .pool_sizes(&sizes);
                // SAFETY: the device is live; `info` lives across the call.
                let raw = unsafe { dev.create_descriptor_pool(&info, None) }
                    .map_err(|e| map_vk_err(At::new("vkCreateDescriptorPool"), e))?;
                self.pools.push(Pool {
                    raw,
                    sets_left: POOL_SETS,
                    descriptors_left: descriptors,
                    descriptors,
                });
                self.pools.len() - 1
            }
        };
        let pool = &mut self.pools[index];
        let layouts = [layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(pool.raw)
            .set_layouts(&layouts);
        // SAFETY: pool and layout are live; the pool has a set and `count` storage- and
        // uniform-buffer descriptors left (counted), and only this batch (behind its
        // queue's lock) uses it.
        let sets = unsafe { dev.allocate_descriptor_sets(&info) }
            .map_err(|e| map_vk_err(At::new("vkAllocateDescriptorSets"), e))?;
        pool.sets_left -= 1;
        pool.descriptors_left[0] -= count[0];
        pool.descriptors_left[1] -= count[1];
        sets.first().copied().ok_or_else(|| {
            map_vk_err(
                At::new("vkAllocateDescriptorSets"),
                vk::Result::ERROR_UNKNOWN,
            )
        })
    }

    /// Lets go of what the last submission held: reads its bounds reports, resets the
    /// descriptor pools, frees the staging memory, releases the modules, queries and freed
    /// buffers. Returns the out-of-range accesses its launches reported, for the queue's
    /// next sync.
    ///
    /// # Safety
    /// The batch's last submission must have finished, or it was never submitted.
    #[must_use = "an out-of-range access the batch reported is for the queue's next sync"]
    pub(crate) unsafe fn recycle(&mut self, device: &DeviceContext) -> Option<Found> {
        // SAFETY: the caller's guarantee.
        let found = unsafe { self.reports.harvest(device) };
        // Its sets go with the pools' reset; its command buffer is begun again before use.
        self.written = None;
        self.bound = Bound::default();
        for pool in &mut self.pools {
            if pool.sets_left < POOL_SETS {
                // SAFETY: no set of the pool is in use (the submission finished). An error
                // here (only out of host memory) leaves the pool as it was: still valid,
                // counted full, so later launches take a new pool.
                let reset = unsafe {
                    device
                        .raw
                        .reset_descriptor_pool(pool.raw, vk::DescriptorPoolResetFlags::empty())
                };
                if reset.is_ok() {
                    pool.sets_left = POOL_SETS;
                    pool.descriptors_left = pool.descriptors;
                }
            }
        }
        for staging in self.staging.drain(..) {
            // SAFETY: the submission that read it finished; nothing else uses it.
            unsafe { staging.destroy(&device.raw) };
            device.allocations.fetch_sub(1, Ordering::SeqCst);
        }
        self.modules.clear();
        self.queries.clear();
        self.released.clear();
        found
    }

    /// Destroys the batch's own objects (the command buffer goes with its pool).
    ///
    /// # Safety
    /// As for [`Batch::recycle`]; the batch must not be used afterwards.
    pub(crate) unsafe fn destroy(mut self, device: &DeviceContext) {
        // SAFETY: guaranteed by the caller. A report still here is of a queue being
        // destroyed without a sync (`VulkanQueue::destroy` syncs first, and so reads it):
        // nothing is left to return it to.
        let _unreported = unsafe { self.recycle(device) };
        // SAFETY: as above.
        unsafe { self.reports.destroy(device) };
        for pool in self.pools.drain(..) {
            // SAFETY: as above; each pool is destroyed once.
            unsafe { device.raw.destroy_descriptor_pool(pool.raw, None) };
        }
    }
}

/// A timestamp query pool of one query. The event and the batch that writes it each hold
/// it; the last to let it go destroys it, so it outlives the work that writes it.
#[derive(Debug)]
pub(crate) struct Query {
    device: Arc<DeviceContext>,
    pub(crate) pool: vk::QueryPool,
}

impl Query {
    pub(crate) fn new(device: &Arc<DeviceContext>) -> Result<Query> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(1);
        // SAFETY: the device is live; `info` lives across the call.
        let pool = unsafe { device.raw.create_query_pool(&info, None) }
            .map_err(|e| map_vk_err(At::new("vkCreateQueryPool"), e))?;
        Ok(Query {
            device: device.clone(),
            pool,
        })
    }
}

impl Drop for Query {
    fn drop(&mut self) {
        // SAFETY: no pending work uses the pool: the batch that writes it holds it until
        // its submission has finished (or it was never submitted); destroyed once, here.
        unsafe { self.device.raw.destroy_query_pool(self.pool, None) };
    }
}
