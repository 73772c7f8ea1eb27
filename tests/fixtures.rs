//! Every fixture of tests/fixtures/ on the CPU backend and on Vulkan, against onnxruntime's
//! outputs. One test per fixture and device, so `cargo test --test fixtures conv` picks a family.

mod common;

use vkml::DeviceSelection;

macro_rules! fixture_tests {
    ($($name:ident),* $(,)?) => {
        const LISTED: &[&str] = &[$(stringify!($name)),*];

        mod cpu {
            $(
                #[test]
                fn $name() {
                    crate::common::check_fixture(stringify!($name), vkml::DeviceSelection::Cpu);
                }
            )*
        }

        mod vulkan {
            $(
                #[test]
                fn $name() {
                    if crate::common::skip_vulkan() {
                        return;
                    }
                    crate::common::check_fixture(stringify!($name), vkml::DeviceSelection::Vulkan);
                }
            )*
        }
    };
}

fixture_tests!(
    add_chain_1000,
    chain_external,
    control_flow,
    elementwise_chain,
    external_data,
    mlp,
    mnist_cnn,
    mnist_cnn_dynamic,
    op_add_broadcast_both,
    op_add_broadcast_channel_const,
    op_add_broadcast_trailing,
    op_add_same_shape,
    op_add_scalar_const,
    op_averagepool_2x2,
    op_averagepool_auto_pad_same_upper,
    op_averagepool_ceil_mode,
    op_averagepool_ceil_mode_pads_include,
    op_averagepool_pads_exclude,
    op_averagepool_pads_include,
    op_batchnormalization_2d,
    op_batchnormalization_4d,
    op_batchnormalization_epsilon,
    op_biasgelu,
    op_biasgelu_f16,
    op_cast_bool_to_float,
    op_cast_float_to_bool,
    op_cast_float_to_float,
    op_cast_float_to_int32,
    op_cast_float_to_int64,
    op_cast_int32_to_float,
    op_cast_int32_to_int64,
    op_cast_int64_to_float,
    op_cast_int64_to_int32,
    op_concat_axis0,
    op_concat_axis1,
    op_concat_axis_negative,
    op_concat_with_constant,
    op_constant_graph_output,
    op_constant_tensor,
    op_constant_value_float,
    op_constant_value_ints_as_shape,
    op_conv_1x1,
    op_conv_auto_pad_same_lower,
    op_conv_auto_pad_same_upper,
    op_conv_auto_pad_valid,
    op_conv_basic_pads,
    op_conv_depthwise,
    op_conv_depthwise_multiplier,
    op_conv_dilations,
    op_conv_groups,
    op_conv_large,
    op_conv_no_bias,
    op_conv_pads_asymmetric,
    op_conv_rect_kernel,
    op_conv_strides,
    op_conv_strides_asymmetric,
    op_div_broadcast_both,
    op_div_broadcast_trailing,
    op_div_same_shape,
    op_div_scalar_const,
    op_fastgelu,
    op_fastgelu_bias,
    op_flatten_axis0,
    op_flatten_axis2,
    op_flatten_axis_negative,
    op_flatten_default_axis,
    op_fusedconv_clip_strided_no_bias,
    op_fusedconv_hardsigmoid_depthwise,
    op_fusedconv_leakyrelu_z,
    op_fusedconv_relu,
    op_fusedconv_relu_z_large,
    op_fusedconv_sigmoid_groups,
    op_fusedconv_tanh_z_no_bias,
    op_fusedconv_z_only,
    op_gather_axis0_int64,
    op_gather_axis1_int32,
    op_gather_int64_data,
    op_gather_negative_axis,
    op_gather_negative_indices,
    op_gather_runtime_indices,
    op_gather_scalar_index,
    op_gemm_alpha_beta_full_c,
    op_gemm_bias_column,
    op_gemm_bias_row,
    op_gemm_bias_scalar,
    op_gemm_large,
    op_gemm_no_bias,
    op_gemm_trans_a,
    op_gemm_trans_ab,
    op_gemm_trans_b,
    op_globalaveragepool,
    op_gqa_decode_past_rotary,
    op_gqa_decode_shared_buffer,
    op_gqa_prompt_packed_rotary,
    op_gqa_prompt_padded,
    op_gru_bidirectional_activations,
    op_gru_linear_before_reset_reverse,
    op_gru_y_h_only,
    op_identity,
    op_identity_graph_output,
    op_lstm_bidirectional_activations,
    op_lstm_bidirectional_seq_lens,
    op_lstm_reverse_input_forget_clip,
    op_matmul_2d,
    op_matmul_batched,
    op_matmul_broadcast_batch,
    op_matmul_broadcast_weight,
    op_matmul_large,
    op_matmul_matrix_vector,
    op_matmul_vector_matrix,
    op_matmulnbits_2bit,
    op_matmulnbits_4bit_decode,
    op_matmulnbits_4bit_float_zero_points,
    op_matmulnbits_4bit_prefill,
    op_matmulnbits_4bit_zero_points_bias,
    op_matmulnbits_8bit,
    op_maxpool_2x2,
    op_maxpool_auto_pad_same_upper,
    op_maxpool_ceil_mode,
    op_maxpool_pads_negative,
    op_maxpool_strides_overlap,
    op_mha_bias_padding_mask,
    op_mha_cross_bnsh_lengths,
    op_mha_past_unidirectional,
    op_mul_broadcast_both,
    op_mul_broadcast_leading,
    op_mul_broadcast_trailing,
    op_mul_same_shape,
    op_mul_scalar_const,
    op_quickgelu,
    op_quickgelu_alpha,
    op_relu,
    op_reshape_explicit,
    op_reshape_infer_dim,
    op_reshape_keep_dim_zero,
    op_reshape_zero_and_infer,
    op_rnn_bidirectional_seq_lens,
    op_rnn_softplus_clip,
    op_rotary_ms,
    op_rotary_ms_f16,
    op_rotary_ms_interleaved_4d,
    op_rotary_ms_offset,
    op_rotary_ms_partial,
    op_rotary_ms_partial_interleaved,
    op_shape,
    op_shape_arithmetic_reshape,
    op_shape_start_end,
    op_sigmoid,
    op_simplified_layernorm,
    op_simplified_layernorm_axis1,
    op_simplified_layernorm_f16,
    op_skip_layernorm,
    op_skip_layernorm_f16,
    op_skip_layernorm_skip_2d_no_beta,
    op_skip_layernorm_skip_batch1_sum,
    op_skip_simplified_layernorm,
    op_skip_simplified_layernorm_2d,
    op_skip_simplified_layernorm_bias_sum,
    op_skip_simplified_layernorm_f16,
    op_softmax_opset11_axis0,
    op_softmax_opset11_axis2,
    op_softmax_opset11_default_axis,
    op_softmax_opset13_axis1,
    op_softmax_opset13_axis_negative,
    op_softmax_opset13_default_axis,
    op_softmax_wide,
    op_squeeze_opset11,
    op_squeeze_opset11_all,
    op_squeeze_opset13,
    op_squeeze_opset13_all,
    op_sub_broadcast_both,
    op_sub_broadcast_trailing,
    op_sub_same_shape,
    op_sub_scalar_const,
    op_tanh,
    op_transpose_2d,
    op_transpose_default_reverse,
    op_transpose_nchw_to_nhwc,
    op_transpose_perm_3d,
    op_unsqueeze_opset11,
    op_unsqueeze_opset11_negative,
    op_unsqueeze_opset13,
    op_unsqueeze_opset13_multi_negative,
    output_names,
    reshape_shape_input,
    squeezenet_1_1,
);

/// A fixture added by the generator but not listed above would go untested.
#[test]
fn every_fixture_folder_is_listed() {
    assert_eq!(common::all_fixture_names(), LISTED);
}

/// Auto (every GPU and the CPU) on one whole model, as the CLI runs it by default.
#[test]
fn mnist_cnn_on_auto() {
    if common::skip_vulkan() {
        return;
    }
    common::check_fixture("mnist_cnn", DeviceSelection::Auto);
}

/// The first GPU by index, as `--device vulkan:0` selects it.
#[test]
fn mlp_on_vulkan_index_0() {
    if common::skip_vulkan() {
        return;
    }
    common::check_fixture("mlp", DeviceSelection::VulkanIndex(0));
}

/// The MatMulNBits fixtures pass on Vulkan because their op runs there, not on the CPU
/// fallback: each plan puts its one op on a GPU (the GEMV kernel for the decode fixture's
/// single row, the tiled one for the 40 rows of the prefill fixture).
#[test]
fn matmulnbits_runs_on_the_gpu() {
    if common::skip_vulkan() {
        return;
    }
    for name in common::all_fixture_names() {
        if !name.starts_with("op_matmulnbits_") {
            continue;
        }
        let session = common::load(&name, DeviceSelection::Vulkan);
        for set in common::data_sets(&name) {
            let plan = session.plan_summary(&set.feeds()).unwrap();
            assert!(
                !plan.ops_per_device.is_empty() && !plan.ops_per_device.contains_key("cpu"),
                "{name}: {plan:?}"
            );
        }
    }
}

/// The comparison itself must be able to fail: every reference matches itself, and a copy with
/// one element nudged past the tolerance does not.
#[test]
fn comparison_catches_a_nudged_element() {
    for name in common::all_fixture_names() {
        for set in common::data_sets(&name) {
            common::assert_outputs_match(&name, &set.outputs, &set.outputs);
            for (out, reference) in &set.outputs {
                if reference.dtype() != vkml::DType::F32 || reference.numel() == 0 {
                    continue;
                }
                let mut values = reference.view::<f32>().unwrap().into_owned();
                let last = values.len() - 1;
                values[last] += 3e-4 * values[last].abs() + 3e-5;
                let nudged = vkml::Tensor::from_vec(reference.shape().to_vec(), values);
                let caught = std::panic::catch_unwind(|| {
                    common::assert_tensor_close(out, &nudged, reference);
                });
                assert!(
                    caught.is_err(),
                    "{name}/{out}: a nudged element passed the comparison"
                );
            }
        }
    }
}

/// The data sets read back with the names the graphs declare, and in-range sizes.
#[test]
fn data_sets_are_readable() {
    let mut total = 0;
    for name in common::all_fixture_names() {
        for set in common::data_sets(&name) {
            assert!(!set.outputs.is_empty(), "{name}");
            assert!(
                set.outputs.iter().all(|(n, _)| !n.is_empty()),
                "{name}: unnamed output"
            );
            total += 1;
        }
    }
    assert!(total >= common::all_fixture_names().len());
}
