//! The Level Zero fixture (offload-ze/fixtures/kernels.spv, built from kernels.cl by
//! build.sh) reflects as the conformance kernels.

use offload_core::{ParamKind, ScalarType};
use offload_spirv::{GlobalVar, KernelEntry, kernels};

const FIXTURE: &[u8] = include_bytes!("../../offload-ze/fixtures/kernels.spv");

#[test]
fn the_fixture_has_the_four_conformance_kernels_and_the_global() {
    let m = kernels(FIXTURE).unwrap();
    let u32_ = ParamKind::Typed(ScalarType::U32);
    let k = |name: &str, params: Vec<ParamKind>| KernelEntry {
        name: name.into(),
        params,
    };
    assert_eq!(
        m.kernels,
        [
            k("add_one", vec![ParamKind::Buffer, u32_]),
            k("fill", vec![ParamKind::Buffer, u32_, u32_]),
            k("noop", vec![]),
            k("read_global", vec![ParamKind::Buffer]),
        ]
    );
    assert_eq!(
        m.globals,
        [GlobalVar {
            name: "g".into(),
            size: 4
        }]
    );
    assert_eq!(m.version, (1, 4));
}
