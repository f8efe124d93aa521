//! Generates the CSI messages (prost) and the gRPC client and server stubs (grpcio) from
//! `proto/csi.proto` into `OUT_DIR`; `src/csi/proto.rs` includes them.
//!
//! protoc and the well-known `google/protobuf/*.proto` files come from the `protoc-bin-vendored`
//! crate, so building needs no protoc on the machine.
//!
//! It also gives the linker two options for the binaries that keep the agent's memory down (see
//! [`link_args`]).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=proto/csi.proto");
    println!("cargo:rerun-if-changed=build.rs");
    link_args();

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

/// Linker options that shrink what every start of the agent pages in (docs/benchmarks.md, "What
/// a restart does, profiled": 8.0-8.6 MB of the binary's pages with 100 tasks before, 5.6-6.3 MB
/// after). The kernel maps a binary's pages 64 KiB at a time around each page touched, so what
/// counts is how many such windows a start touches.
///
/// - `-z keep-text-section-prefix`: the compilers' `.text.startup` (static initialisers),
///   `.text.unlikely` (cold paths) and `.text.hot` sections stay together instead of being
///   interleaved with the rest of the code. gRPC's C++ core has 260 static initialisers, one
///   per source file, which run at every start even with no CSI plugin; spread through its 3 MB
///   of code, they paged in nearly all of it.
/// - `-z pack-relative-relocs`: relative relocations as DT_RELR, 3 KB instead of 300 KB of
///   `.rela.dyn` that the dynamic loader reads at every start. Needs glibc 2.36 at run time, so
///   only when the build machine's glibc (the target's, for a native build) has it.
fn link_args() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-z,keep-text-section-prefix");
    let native = std::env::var("HOST").ok() == std::env::var("TARGET").ok();
    let gnu = std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    if native && gnu && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether this machine's glibc (`getconf GNU_LIBC_VERSION`: "glibc 2.36") is at least
/// `major.minor`; false when that cannot be told.
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut parts = text
        .trim()
        .trim_start_matches("glibc ")
        .split('.')
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b)) => (a, b) >= (major, minor),
        _ => false,
    }
}
