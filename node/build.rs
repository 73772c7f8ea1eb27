//! Build steps: the ONNX schema (our own .proto, compiled by prost through protox, so no protoc)
//! and the GLSL compute shaders (compiled to SPIR-V by glslang and embedded in the binary).

#[path = "build/proto.rs"]
mod proto;
#[path = "build/shaders.rs"]
mod shaders;

fn main() {
    proto::build();
    shaders::build();
}
