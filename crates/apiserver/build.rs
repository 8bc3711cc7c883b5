//! Compiles the vendored Kubernetes `.proto` files (`proto/`) into a file descriptor set that
//! the `protobuf` feature embeds.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "protobuf")]
    compile_protos();
}

#[cfg(feature = "protobuf")]
fn compile_protos() {
    let files = [
        "api/core/v1/generated.proto",
        "api/coordination/v1/generated.proto",
        "apimachinery/pkg/apis/meta/v1/generated.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let mut compiler = protox::Compiler::new(["proto"]).expect("the proto include path");
    compiler.include_imports(true);
    for file in files {
        compiler
            .open_file(file)
            .expect("a vendored .proto file compiles");
    }
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(
        out.join("kubernetes.bin"),
        compiler.encode_file_descriptor_set(),
    )
    .expect("write the descriptor set");
}
