//! A model serialised by Python's `onnx` 1.22 (onnx.helper), checking our schema's field
//! numbers and packing against the reference implementation. It was made with:
//!
//! ```text
//! W = numpy_helper.from_array(np.array([[1.5, -2.0, 0.25]], dtype=np.float32), "W")
//! Bt = helper.make_tensor("B", TensorProto.FLOAT16, [2], [1.0, -2.0])
//! then_g = make_graph([make_node("Identity", ["W"], ["t_out"])], "then_body", [],
//!                     [make_tensor_value_info("t_out", FLOAT, [1, 3])])
//! else_g = make_graph([make_node("Neg", ["W"], ["e_out"], name="neg")], "else_body", [],
//!                     [make_tensor_value_info("e_out", FLOAT, [1, 3])])
//! nodes = [make_node("Constant", [], ["c"], value=make_tensor("", INT64, [2], [7, -8])),
//!          make_node("MatMul", ["X", "W"], ["y"], name="mm"),
//!          make_node("If", ["cond"], ["z"], then_branch=then_g, else_branch=else_g),
//!          make_node("Custom", ["y"], ["q"], domain="ai.onnx", alpha=0.5, axes=[1, -1],
//!                    mode="nearest", scales=[1.0, 2.5], names=["a", "b"])]
//! g = make_graph(nodes, "main",
//!     [tvi("X", FLOAT, ["batch", 1]), tvi("cond", BOOL, []), tvi("W", FLOAT, [1, 3])],
//!     [tvi("y", FLOAT, ["batch", None]), tvi("z", FLOAT, None)], initializer=[W, Bt],
//!     value_info=[tvi("q", FLOAT16, [4, "n"])])
//! m = make_model(g, opset_imports=[make_opsetid("", 17), make_opsetid("com.microsoft", 1)],
//!                producer_name="handmade", ir_version=8)
//! m.SerializeToString().hex()
//! ```

use super::super::{load, load_from_bytes};
use super::TempDir;
use crate::model::Dim;
use crate::ops::AttrValue;
use crate::tensor::DType;

const MODEL_HEX: &str = "0808120868616e646d6164653a99040a2e1201632208436f6e7374616e742a1f0a0576616c75652a13080210073a0b07f8ffffffffffffffff014200a001040a150a01580a01571201791a026d6d22064d61744d756c0aa9010a04636f6e6412017a220249662a4c0a0b656c73655f6272616e6368323a0a140a01571205655f6f75741a036e656722034e65671209656c73655f626f647962170a05655f6f7574120e0a0c080112080a0208010a020803a001052a4c0a0b7468656e5f6272616e6368323a0a140a01571205745f6f757422084964656e7469747912097468656e5f626f647962170a05745f6f7574120e0a0c080112080a0208010a020803a001050a7d0a01791201712206437573746f6d2a0f0a05616c706861150000003fa001012a160a0461786573400140ffffffffffffffffff01a001072a120a046d6f646522076e656172657374a001032a100a056e616d65734a01614a0162a001082a150a067363616c65733d0000803f3d00002040a001063a0761692e6f6e6e7812046d61696e2a170801080310014201574a0c0000c03f000000c00000803e2a0e0802100a2a0580788080034201425a180a015812130a110801120d0a07120562617463680a0208015a0e0a04636f6e6412060a04080912005a130a0157120e0a0c080112080a0208010a02080362160a017912110a0f0801120b0a07120562617463680a0062090a017a12040a0208016a140a0171120f0a0d080a12090a0208040a0312016e42040a00101142110a0d636f6d2e6d6963726f736f66741001";

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn reads_a_model_written_by_python_onnx() {
    let def = load_from_bytes(unhex(MODEL_HEX).into(), None).unwrap();
    assert_eq!(
        (def.ir_version, def.opset, def.producer.as_str()),
        (8, 17, "handmade")
    );
    let g = &def.graph;
    assert_eq!(g.name, "main");

    let names: Vec<&str> = g.initializers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["W", "B"]);
    let w = &g.initializers[0].1;
    assert_eq!((w.dtype(), w.shape()), (DType::F32, &[1, 3][..]));
    assert_eq!(w.view::<f32>().unwrap()[..], [1.5, -2.0, 0.25]);
    let b = &g.initializers[1].1;
    assert_eq!(b.dtype(), DType::F16);
    assert_eq!(b.to_f64_vec().unwrap(), [1.0, -2.0]);

    // W is both input and initializer; only X and cond must be fed.
    let inputs: Vec<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(inputs, ["X", "cond"]);
    assert_eq!(
        g.inputs[0].dims,
        Some(vec![Dim::Sym("batch".into()), Dim::Fixed(1)])
    );
    assert_eq!(g.inputs[1].dims, Some(vec![]));
    assert_eq!(
        g.outputs[0].dims,
        Some(vec![Dim::Sym("batch".into()), Dim::Sym("?".into())])
    );
    assert_eq!(g.outputs[1].dims, None);
    assert_eq!(g.value_info[0].dtype, Some(DType::F16));
    assert_eq!(
        g.value_info[0].dims,
        Some(vec![Dim::Fixed(4), Dim::Sym("n".into())])
    );

    let names: Vec<&str> = g.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["Constant_0", "mm", "If_2", "Custom_3"]);
    let c = g.nodes[0].attrs.tensor_opt("value").unwrap().unwrap();
    assert_eq!(c.to_i64_vec().unwrap(), [7, -8]);

    let Some(AttrValue::Graph(else_g)) = g.nodes[2].attrs.get("else_branch") else {
        panic!("no else_branch graph");
    };
    assert_eq!(
        (else_g.name.as_str(), else_g.nodes[0].name.as_str()),
        ("else_body", "neg")
    );
    assert_eq!(
        else_g.outputs[0].dims,
        Some(vec![Dim::Fixed(1), Dim::Fixed(3)])
    );

    let custom = &g.nodes[3];
    assert_eq!(custom.domain, "");
    let a = &custom.attrs;
    assert_eq!(a.float("alpha", 0.0).unwrap(), 0.5);
    assert_eq!(a.ints_opt("axes").unwrap().unwrap(), [1, -1]);
    assert_eq!(a.string("mode", "").unwrap(), "nearest");
    // Python writes repeated floats unpacked; prost must read both encodings.
    assert_eq!(a.floats_opt("scales").unwrap().unwrap(), [1.0, 2.5]);
    assert!(matches!(a.get("names"), Some(AttrValue::Strings(s)) if s == &["a", "b"]));
}

// A model saved by onnx 1.22 with its weights in one external file (unaligned offsets):
// inits = [numpy_helper.from_array(np.arange(n, dtype=dt) * 3 - 1, f"w_{np.dtype(dt).name}")
//          for n, dt in [(5, float32), (3, int8), (7, float16), (2, float64), (4, int64),
//                        (3, uint16)]]
// g = make_graph([make_node("Identity", ["w_float32"], ["y"])], "g", [],
//                [make_tensor_value_info("y", FLOAT, [5])], initializer=inits)
// onnx.save_model(make_model(g, opset_imports=[make_opsetid("", 18)]), "ext.onnx",
//     save_as_external_data=True, all_tensors_to_one_file=True, location="ext.data",
//     size_threshold=0)
const EXT_MODEL_HEX: &str = "080d3ac3030a180a09775f666c6f6174333212017922084964656e746974791201672a42080510014209775f666c6f617433326a140a086c6f636174696f6e12086578742e646174616a0b0a066f66667365741201306a0c0a066c656e6774681202323070012a3f080310034206775f696e74386a140a086c6f636174696f6e12086578742e646174616a0c0a066f6666736574120232306a0b0a066c656e67746812013370012a430807100a4209775f666c6f617431366a140a086c6f636174696f6e12086578742e646174616a0c0a066f6666736574120232336a0c0a066c656e6774681202313470012a430802100b4209775f666c6f617436346a140a086c6f636174696f6e12086578742e646174616a0c0a066f6666736574120233376a0c0a066c656e6774681202313670012a41080410074207775f696e7436346a140a086c6f636174696f6e12086578742e646174616a0c0a066f6666736574120235336a0c0a066c656e6774681202333270012a41080310044208775f75696e7431366a140a086c6f636174696f6e12086578742e646174616a0c0a066f6666736574120238356a0b0a066c656e6774681201367001620f0a0179120a0a08080112040a02080542040a001012";
const EXT_DATA_HEX: &str = "000080bf000000400000a0400000004100003041ff020500bc0040004500488049004b404c000000000000f0bf0000000000000040ffffffffffffffff020000000000000005000000000000000800000000000000ffff02000500";

#[test]
fn reads_external_data_saved_by_python_onnx() {
    let dir = TempDir::new("pyext");
    std::fs::write(dir.join("ext.onnx"), unhex(EXT_MODEL_HEX)).unwrap();
    std::fs::write(dir.join("ext.data"), unhex(EXT_DATA_HEX)).unwrap();
    let def = load(&dir.join("ext.onnx")).unwrap();
    let got: Vec<(&str, DType, Vec<f64>)> = def
        .graph
        .initializers
        .iter()
        .map(|(n, t)| (n.as_str(), t.dtype(), t.to_f64_vec().unwrap()))
        .collect();
    // numpy_helper.to_array of the same tensors, by hand: arange(n) * 3 - 1.
    let want: Vec<(&str, DType, Vec<f64>)> = vec![
        ("w_float32", DType::F32, vec![-1.0, 2.0, 5.0, 8.0, 11.0]),
        ("w_int8", DType::I8, vec![-1.0, 2.0, 5.0]),
        (
            "w_float16",
            DType::F16,
            vec![-1.0, 2.0, 5.0, 8.0, 11.0, 14.0, 17.0],
        ),
        ("w_float64", DType::F64, vec![-1.0, 2.0]),
        ("w_int64", DType::I64, vec![-1.0, 2.0, 5.0, 8.0]),
        ("w_uint16", DType::U16, vec![65535.0, 2.0, 5.0]),
    ];
    assert_eq!(got, want);
    assert_eq!(def.opset, 18);
}
