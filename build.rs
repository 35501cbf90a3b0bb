//! Generates the gRPC API's messages, server and client from `proto/` with pure-Rust
//! tools: protox compiles the .proto file (no `protoc` on the machine needed), prost-build
//! writes the messages and tonic-build the service code into `OUT_DIR`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/grpc_service.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    let descriptors = protox::compile([PROTO], ["proto"])?;
    let mut config = prost_build::Config::new();
    // Tensor data is handed on without a copy.
    config.bytes([".inference.ModelInferRequest.raw_input_contents"]);
    config.service_generator(
        tonic_build::configure()
            .build_client(true)
            .build_server(true)
            .service_generator(),
    );
    config.compile_fds(descriptors)?;
    Ok(())
}
