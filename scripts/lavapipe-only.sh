# Sourced by the test scripts (scripts/test.sh, python/ci.sh) from the repository root.
# The Vulkan tests run on lavapipe (Mesa's CPU driver, a listed package). Every Vulkan
# instance makes the loader load every driver installed, and the Intel and Radeon drivers
# Mesa ships beside lavapipe find no device here but cost most of an instance's creation:
# about 40% of the Vulkan conformance run. So the loader is pointed at lavapipe alone,
# unless the caller chose drivers (VK_DRIVER_FILES or VK_ICD_FILENAMES set) or asked for
# every one (OFFLOAD_TEST_ALL_VULKAN_DRIVERS=1, e.g. on a machine with a Vulkan GPU).
lavapipe=/usr/share/vulkan/icd.d/lvp_icd.$(uname -m).json
if [[ -z "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" && "${OFFLOAD_TEST_ALL_VULKAN_DRIVERS:-0}" != 1 && -f $lavapipe ]]; then
    export VK_DRIVER_FILES=$lavapipe
    echo "$(basename "$0"): Vulkan tests on lavapipe alone (VK_DRIVER_FILES=$lavapipe;" \
        "OFFLOAD_TEST_ALL_VULKAN_DRIVERS=1 keeps every installed driver)"
fi
