//! Builds the eBPF objects of the `cfxdp` crate (`ebpf/`) for
//! `bpfel-unknown-none` with the nightly toolchain and bpf-linker, into
//! `OUT_DIR`: `cfxdp`, the program `cfctl::xdp` loads; `baselines`, the
//! programs the XDP benchmark measures it beside; `locate`, the probe the
//! tests use to hold the hashes and buckets the data plane computes
//! against filter-core's.

use std::path::Path;

use anyhow::Context as _;

fn main() -> anyhow::Result<()> {
    let ebpf_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ebpf");
    let root_dir = ebpf_dir
        .to_str()
        .with_context(|| format!("the eBPF crate's path {ebpf_dir:?} is not UTF-8"))?;
    // aya-build runs cargo in the current directory. Run it in the eBPF
    // crate, which the root workspace excludes, so that it resolves as its
    // own workspace: otherwise features that host members turn on for
    // shared dependencies (std, filter-core's protocol) would be unified
    // into the BPF build.
    std::env::set_current_dir(&ebpf_dir)
        .with_context(|| format!("cannot enter the eBPF crate at {ebpf_dir:?}"))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "cfxdp",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
}
