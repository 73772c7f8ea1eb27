//! Tensor-core features: which cooperative-matrix shapes a device runs, and the two feature
//! structs newer than ash's headers (VK_NV_cooperative_matrix2, VK_KHR_shader_bfloat16),
//! declared here with the registry's layouts.

use std::ffi::{CStr, c_void};

use ash::vk;

pub(crate) const COOPMAT2_NAME: &CStr = c"VK_NV_cooperative_matrix2";
pub(crate) const BFLOAT16_NAME: &CStr = c"VK_KHR_shader_bfloat16";

/// VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_2_FEATURES_NV.
const COOPMAT2_FEATURES: i32 = 1_000_593_000;
/// VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES_KHR.
const BFLOAT16_FEATURES: i32 = 1_000_141_000;
/// VK_COMPONENT_TYPE_BFLOAT16_KHR.
const COMPONENT_BFLOAT16: i32 = 1_000_141_000;

/// VkPhysicalDeviceCooperativeMatrix2FeaturesNV.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Coopmat2Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    pub workgroup_scope: vk::Bool32,
    pub flexible_dimensions: vk::Bool32,
    pub reductions: vk::Bool32,
    pub conversions: vk::Bool32,
    pub per_element_operations: vk::Bool32,
    pub tensor_addressing: vk::Bool32,
    pub block_loads: vk::Bool32,
}

impl Default for Coopmat2Features {
    fn default() -> Self {
        Coopmat2Features {
            s_type: vk::StructureType::from_raw(COOPMAT2_FEATURES),
            p_next: std::ptr::null_mut(),
            workgroup_scope: 0,
            flexible_dimensions: 0,
            reductions: 0,
            conversions: 0,
            per_element_operations: 0,
            tensor_addressing: 0,
            block_loads: 0,
        }
    }
}

impl Coopmat2Features {
    /// What gemm_coop2.comp uses.
    pub fn usable(&self) -> bool {
        self.workgroup_scope != 0
            && self.flexible_dimensions != 0
            && self.per_element_operations != 0
            && self.tensor_addressing != 0
    }

    /// Only what [`Coopmat2Features::usable`] checks, to enable.
    pub fn needed() -> Self {
        Coopmat2Features {
            workgroup_scope: vk::TRUE,
            flexible_dimensions: vk::TRUE,
            per_element_operations: vk::TRUE,
            tensor_addressing: vk::TRUE,
            ..Default::default()
        }
    }
}

/// VkPhysicalDeviceShaderBfloat16FeaturesKHR.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bfloat16Features {
    s_type: vk::StructureType,
    p_next: *mut c_void,
    pub bfloat16_type: vk::Bool32,
    pub dot_product: vk::Bool32,
    pub cooperative_matrix: vk::Bool32,
}

impl Default for Bfloat16Features {
    fn default() -> Self {
        Bfloat16Features {
            s_type: vk::StructureType::from_raw(BFLOAT16_FEATURES),
            p_next: std::ptr::null_mut(),
            bfloat16_type: 0,
            dot_product: 0,
            cooperative_matrix: 0,
        }
    }
}

impl Bfloat16Features {
    pub fn usable(&self) -> bool {
        self.bfloat16_type != 0 && self.cooperative_matrix != 0
    }

    pub fn needed() -> Self {
        Bfloat16Features {
            bfloat16_type: vk::TRUE,
            cooperative_matrix: vk::TRUE,
            ..Default::default()
        }
    }
}

// SAFETY: both are Vulkan input/output structures: they begin with sType and pNext as
// VkBaseOutStructure does (which ash's chain walking relies on), carry the sType the registry
// gives them, and the Vulkan specification allows them in VkPhysicalDeviceFeatures2's and
// VkDeviceCreateInfo's pNext chains.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Coopmat2Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Coopmat2Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Bfloat16Features {}
// SAFETY: as above.
unsafe impl vk::ExtendsDeviceCreateInfo for Bfloat16Features {}

/// The subgroup-scope shapes gemm_coop.comp needs: 16x16x16, A and B of `ab`, C and the result
/// f32.
pub(crate) fn has_16x16x16(props: &[vk::CooperativeMatrixPropertiesKHR<'_>], ab: Half) -> bool {
    let t = match ab {
        Half::F16 => vk::ComponentTypeKHR::FLOAT16,
        Half::Bf16 => vk::ComponentTypeKHR::from_raw(COMPONENT_BFLOAT16),
    };
    props.iter().any(|p| {
        p.m_size == 16
            && p.n_size == 16
            && p.k_size == 16
            && p.a_type == t
            && p.b_type == t
            && p.c_type == vk::ComponentTypeKHR::FLOAT32
            && p.result_type == vk::ComponentTypeKHR::FLOAT32
            && p.scope == vk::ScopeKHR::SUBGROUP
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Half {
    F16,
    Bf16,
}
