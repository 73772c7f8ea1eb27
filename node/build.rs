//! Build step: the ONNX schema (our own .proto, compiled by prost through protox, so no
//! protoc). The shaders are compiled by the vkml-shaders crate.

#[path = "build/proto.rs"]
mod proto;

fn main() {
    proto::build();
}
