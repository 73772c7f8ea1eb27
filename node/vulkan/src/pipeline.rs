//! Compute pipelines: one layout for every shader (push constants only, no descriptor sets),
//! one pipeline per shader, created on first use and kept.

use std::collections::HashMap;
use std::sync::RwLock;

use ash::vk;

use vkml_shaders::Kernel;

use super::error::{VulkanError, vk_error};

/// Push-constant bytes VKML ever uses; the layout's range is this or the device's limit.
const MAX_PUSH: u32 = 256;

pub(crate) struct Pipelines {
    pub layout: vk::PipelineLayout,
    /// Bytes of push constants a dispatch may use on this device.
    pub push_size: u32,
    cache: RwLock<HashMap<Kernel, vk::Pipeline>>,
}

impl Pipelines {
    pub fn new(device: &ash::Device, max_push_constants: u32) -> Result<Pipelines, VulkanError> {
        let push_size = max_push_constants.min(MAX_PUSH) & !3;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(push_size)];
        let info = vk::PipelineLayoutCreateInfo::default().push_constant_ranges(&ranges);
        // SAFETY: valid create info on a live device; the range is within the device limit.
        let layout = unsafe { device.create_pipeline_layout(&info, None) }
            .map_err(vk_error("vkCreatePipelineLayout"))?;
        Ok(Pipelines {
            layout,
            push_size,
            cache: RwLock::new(HashMap::new()),
        })
    }

    /// The pipeline of `kernel`, created on first use. Threads asking for a new kernel at
    /// once may each compile it; one result is kept and the others destroyed.
    pub fn get(&self, device: &ash::Device, kernel: Kernel) -> Result<vk::Pipeline, VulkanError> {
        if let Some(&p) = self.cache.read().expect("pipeline cache lock").get(&kernel) {
            return Ok(p);
        }
        let created = self.create(device, kernel.name(), kernel.spirv())?;
        let mut cache = self.cache.write().expect("pipeline cache lock");
        if let Some(&existing) = cache.get(&kernel) {
            // SAFETY: `created` was never used in a command buffer.
            unsafe { device.destroy_pipeline(created, None) };
            return Ok(existing);
        }
        cache.insert(kernel, created);
        Ok(created)
    }

    fn create(
        &self,
        device: &ash::Device,
        name: &str,
        code: &[u32],
    ) -> Result<vk::Pipeline, VulkanError> {
        let module_info = vk::ShaderModuleCreateInfo::default().code(code);
        // SAFETY: `code` is SPIR-V produced by glslang at build time for Vulkan 1.2.
        let module = unsafe { device.create_shader_module(&module_info, None) }
            .map_err(vk_error("vkCreateShaderModule"))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(c"main");
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(self.layout);
        // SAFETY: module and layout are live children of `device`; the create info outlives
        // the call. A module may be destroyed once the pipeline exists.
        let result = unsafe {
            let r = device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
            device.destroy_shader_module(module, None);
            r
        };
        match result {
            Ok(p) => Ok(p[0]),
            Err((_, r)) => {
                tracing::error!("creating the pipeline of shader '{name}' failed: {r}");
                Err(vk_error("vkCreateComputePipelines")(r))
            }
        }
    }

    /// # Safety
    /// The device must be idle and no command buffer using these pipelines may be submitted
    /// again.
    pub unsafe fn destroy(&self, device: &ash::Device) {
        let cache = self.cache.read().expect("pipeline cache lock");
        // SAFETY: the caller guarantees nothing uses the pipelines or the layout any more.
        unsafe {
            for &p in cache.values() {
                device.destroy_pipeline(p, None);
            }
            device.destroy_pipeline_layout(self.layout, None);
        }
    }
}
