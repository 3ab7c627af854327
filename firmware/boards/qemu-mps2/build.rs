//! Puts memory.x and device.x on the linker's path and links with
//! cortex-m-rt's and defmt's scripts.
use std::{env, fs, path::PathBuf};

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out.join("memory.x"), include_bytes!("memory.x")).expect("write memory.x");
    println!("cargo:rustc-link-search={}", out.display());
    // cortex-m-rt's `device` feature includes device.x, where a PAC names
    // its interrupt handlers; this board's table (`__INTERRUPTS` in
    // src/main.rs) points every interrupt at the default handler itself.
    fs::write(
        out.join("device.x"),
        "/* mps2-an386: every interrupt goes to DefaultHandler (src/main.rs). */\n",
    )
    .expect("write device.x");
    println!("cargo:rerun-if-changed=memory.x");
    println!("cargo:rustc-link-arg-bins=--nmagic");
    println!("cargo:rustc-link-arg-bins=-Tlink.x");
    println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
}
