//! Tells the generated decoders (`src/typed/generated.rs`) which Kubernetes version the
//! application picked for k8s-openapi: `cfg(k8s_openapi_minor = "36")` for `v1_36`. k8s-openapi
//! hands its version to the build scripts of the crates that depend on it (its
//! `DEP_K8S_OPENAPI_*_VERSION`, `0x00_MM_NN_00`).

/// The versions the decoders were generated from; a newer one reads as the newest of these.
const MINORS: std::ops::RangeInclusive<u32> = 33..=37;

fn main() {
    let values: Vec<String> = MINORS.map(|m| format!("\"{m}\"")).collect();
    println!(
        "cargo::rustc-check-cfg=cfg(k8s_openapi_minor, values({}))",
        values.join(", ")
    );
    let version = std::env::vars().find_map(|(key, value)| {
        (key.starts_with("DEP_K8S_OPENAPI_") && key.ends_with("_VERSION"))
            .then(|| value.parse::<u32>().ok())
            .flatten()
    });
    let Some(version) = version else {
        panic!("k8s-openapi did not give its version (DEP_K8S_OPENAPI_*_VERSION)");
    };
    let minor = ((version >> 8) & 0xff).clamp(*MINORS.start(), *MINORS.end());
    println!("cargo::rustc-cfg=k8s_openapi_minor=\"{minor}\"");
}
