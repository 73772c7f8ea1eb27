use std::collections::HashSet;

use vkml_shaders::*;

#[test]
fn every_kernel_is_listed_sorted_and_found_by_name() {
    let all = all();
    assert!(all.len() > 300, "{} kernels", all.len());
    assert!(all.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
    for &k in all {
        assert_eq!(find(k.name()), Some(k));
        assert_eq!(k.spirv()[0], 0x0723_0203, "{k}: SPIR-V magic");
        assert!(k.push_bytes() <= 128, "{k}");
        assert!(8 * k.buffers() <= k.push_bytes(), "{k}");
    }
    assert_eq!(find("no_such_kernel"), None);
    let names: HashSet<Kernel> = all.iter().copied().collect();
    assert_eq!(names.len(), all.len());
}

#[test]
fn variants_name_their_kernels() {
    assert_eq!(binary::Variant::F32.name(), "binary_f32");
    assert_eq!(binary::Variant::CmpU64.name(), "binary_cmp_u64");
    assert_eq!(binary::Variant::ALL.len(), 22);
    assert_eq!(gemm::Variant::F32.name(), "gemm_f32");
    assert_eq!(gemm_splitk::Variant::F32.name(), "gemm_splitk_f32");
    assert_eq!(einsum2::Variant::F16.name(), "einsum2_f16");
    assert_eq!(copy::Variant::Main.name(), "copy");
    // The training optimizers and TreeEnsemble, one kernel per float type.
    assert_eq!(adagrad::Variant::ALL.len(), 2);
    assert_eq!(adam::Variant::F64.name(), "adam_f64");
    assert_eq!(momentum::Variant::F32.name(), "momentum_f32");
    assert_eq!(tree_ensemble::Variant::F64.name(), "tree_ensemble_f64");
    assert_eq!(
        <adam::Variant as Shader>::BUFFER_NAMES,
        ["r", "t", "x", "g", "v", "h", "x_new", "v_new", "h_new"]
    );
    assert_eq!(r#where::Variant::ALL[0].kernel().name(), "where_w8");
    assert_eq!(
        gemm_coop2::Variant::ExactWideBf16.name(),
        "gemm_coop2_exact_wide_bf16"
    );
    for v in binary::Variant::ALL {
        let k = v.kernel();
        assert_eq!(k.push_bytes(), binary::PUSH_BYTES);
        assert_eq!(k.buffers() as usize, <binary::Variant as Shader>::BUFFERS);
    }
}

#[test]
fn params_words_follow_the_shader_block() {
    // gemm.comp: a, b, c, y, then M N K nb1 nb2 rsA csA bA0 bA1 bA2 rsB csB bB0 bB1 bB2 rsC csC
    // alpha beta has_c offA offB offY.
    let p = gemm::Params {
        M: 7,
        rsC: 3,
        alpha: 2.0,
        offY: 9,
        ..Default::default()
    };
    let w = gemm::Variant::param_words(&p);
    assert_eq!(w.len(), 23);
    assert_eq!((w[0], w[15], w[17], w[22]), (7, 3, 2.0f32.to_bits(), 9));
    let s = gemm_splitk::Params {
        SPLITS: 4,
        KSLICE: 64,
        ..Default::default()
    };
    let w = gemm_splitk::Variant::param_words(&s);
    assert_eq!((w[15], w[16]), (4, 64));
    let b = gemm::Buffers {
        a: "a",
        b: "b",
        c: "c",
        y: "y",
    };
    assert_eq!(gemm::Variant::buffer_list(b), ["a", "b", "c", "y"]);
    assert_eq!(
        <einsum2::Variant as Shader>::BUFFER_NAMES,
        ["a", "b", "y", "t"]
    );
    assert_eq!(<einsum1::Variant as Shader>::BUFFER_NAMES, ["a", "y", "t"]);
}

#[test]
fn op_codes_keep_their_values() {
    assert_eq!(op::Binary::Add.code(), 0);
    assert_eq!(op::Binary::PRelu.code(), 7);
    assert_eq!(op::Binary::Copy.code(), 16);
    assert_eq!(op::Compare::Ge.code(), 4);
    assert_eq!(op::Unary::GeluTanh.code(), 12);
    assert_eq!(op::Unary::IsInf.code(), 41);
    assert_eq!(op::Unary::Swish.code(), 42);
    assert_eq!(op::Unary::IsNaN.glsl_name(), "UN_IS_NAN");
    assert_eq!(op::FusedStep::Pow.code(), 15);
    assert_eq!(op::FusedOperand::Buffer3.code(), 6);
    assert_eq!(op::Reduce::SumSquare.code(), 9);
    assert_eq!(op::Pool::Lp.code(), 3);
    assert_eq!(op::Softmax::Hardmax.code(), 2);
    for u in op::Unary::ALL {
        assert_eq!(op::Unary::from_code(u.code()), Some(u));
    }
    assert_eq!(op::Unary::ALL.len(), 43);
    assert_eq!(op::Binary::from_code(6), None);
}

#[test]
fn needs_come_from_the_capabilities() {
    assert_eq!(
        binary::Variant::F32.kernel().needs(),
        ShaderNeeds::default()
    );
    // f16 is only stored: the arithmetic is in float.
    assert_eq!(
        binary::Variant::F16.kernel().needs(),
        ShaderNeeds::STORAGE16
    );
    let coop2 = gemm_coop2::Variant::Bf16.kernel().needs();
    assert!(ShaderNeeds::COOPERATIVE_MATRIX2.met_by(coop2));
    assert!(ShaderNeeds::BFLOAT16.met_by(coop2));
    assert!(coop2.names().contains(&"shaderBFloat16Type"));
}
