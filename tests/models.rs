//! Models of the families people run (ResNet, MobileNetV2, a YOLO-style detector, BERT, GPT-2,
//! ViT, a Whisper-style encoder, a bidirectional-LSTM tagger, a GRU classifier), exported by PyTorch's TorchScript exporter with static sizes
//! and by its dynamo exporter with symbolic batch and sequence sizes, each on the CPU backend
//! and on Vulkan against onnxruntime's outputs (tests/generate/generate_models.py); and a tiny
//! Llama as Optimum and as ONNX Runtime GenAI's model builder export it (GroupQueryAttention,
//! int4 MatMulNBits), a prefill and three decode steps each (tests/generate/llama.py;
//! generation itself is tests/llm.rs).
//!
//! The quantized forms (tests/generate/quantized_models.py: `resnet_qdq` and `mobilenetv2_qdq`
//! statically quantized to QDQ per channel, `bert_int8_dynamic` dynamically quantized) are held
//! to the same tolerance as the float models, 1e-4 relative, against onnxruntime with its graph
//! optimisations on: its int8 kernels, as a user's session runs the model.

mod common;

macro_rules! model_tests {
    ($($name:ident),* $(,)?) => {
        mod cpu {
            $(
                #[test]
                fn $name() {
                    crate::common::check_dir(
                        &crate::common::real_model_dir(stringify!($name)),
                        vkml::DeviceSelection::Cpu,
                    );
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
                    crate::common::check_dir(
                        &crate::common::real_model_dir(stringify!($name)),
                        vkml::DeviceSelection::Vulkan,
                    );
                }
            )*
        }

        /// Every folder of tests/models/ is listed above, so none is silently left out.
        #[test]
        fn every_model_is_listed() {
            let listed = [$(stringify!($name)),*];
            let dir = crate::common::real_model_dir("");
            let mut found: Vec<String> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .filter_map(|e| {
                    let e = e.ok()?;
                    e.path().join("model.onnx").exists()
                        .then(|| e.file_name().to_string_lossy().into_owned())
                })
                .collect();
            found.sort();
            let mut listed: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
            listed.sort();
            assert_eq!(found, listed, "tests/models.rs must list every folder of tests/models/");
        }
    };
}

model_tests!(
    bert_dynamic,
    bert_int8_dynamic,
    bert_static,
    gpt2_dynamic,
    gpt2_static,
    gru_dynamic,
    gru_static,
    llama_genai,
    llama_optimum,
    lstm_tagger_dynamic,
    lstm_tagger_static,
    mobilenetv2_dynamic,
    mobilenetv2_qdq,
    mobilenetv2_static,
    resnet_dynamic,
    resnet_qdq,
    resnet_static,
    vit_dynamic,
    vit_static,
    whisper_encoder_dynamic,
    whisper_encoder_static,
    yolo_dynamic,
    yolo_nms,
    yolo_static,
);
