//! Generates the CSI messages (prost) and the gRPC client and server stubs (grpcio) from
//! `proto/csi.proto` into `OUT_DIR`; `src/csi/proto.rs` includes them.
//!
//! protoc and the well-known `google/protobuf/*.proto` files come from the `protoc-bin-vendored`
//! crate, so building needs no protoc on the machine.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    println!("cargo:rerun-if-changed=build.rs");

    let protoc = protoc_bin_vendored::protoc_bin_path().expect("vendored protoc for this platform");
    let include = protoc_bin_vendored::include_path().expect("vendored protobuf includes");
    // prost-build 0.11 finds protoc only through this variable.
    std::env::set_var("PROTOC", protoc);

    let mut config = prost_build::Config::new();
    config.service_generator(Box::new(grpcio_compiler::prost_codegen::Generator));
    // Sorted maps keep the API's JSON and the state file stable from one write to the next.
    config.btree_map(["."]);
    let protos = [PathBuf::from("proto/csi.proto")];
    let includes = [PathBuf::from("proto"), include];
    if let Err(e) = config.compile_protos(&protos, &includes) {
        panic!("generating the CSI gRPC code from proto/csi.proto failed: {e}");
    }
}
