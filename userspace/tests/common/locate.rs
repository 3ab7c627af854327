//! The `locate` object of the eBPF crate (built for the tests, never
//! loaded by cfctl): its program computes, with the data plane's own code,
//! the hash, fingerprints and buckets of a frame's source address at a
//! profile's first prefix length, for the tests to hold against
//! filter-core's on the host.

use std::os::fd::AsFd;

use aya::maps::Map;
use aya::programs::Xdp;
use aya::{Ebpf, EbpfLoader};
use cfctl::xdp::mapped::MappedValue;
use cfctl::xdp::test_run::run_xdp;
use cfxdp::{Config, FilterProfile, LocateReport, LOCATE_MAP, LOCATE_PROGRAM};

static LOCATE_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/locate"));

/// The loaded `locate` program and its two maps, mapped.
pub struct Locator {
    ebpf: Ebpf,
    config: MappedValue<Config>,
    report: MappedValue<LocateReport>,
}

fn mapped<T: cfctl::xdp::mapped::PlainData>(map: &Map) -> MappedValue<T> {
    let Map::Array(data) = map else {
        panic!("an array map");
    };
    MappedValue::new(data.fd().as_fd()).expect("mapping an mmapable array")
}

impl Locator {
    pub fn load() -> Self {
        super::require_root();
        let mut ebpf = EbpfLoader::new()
            .load(LOCATE_OBJECT)
            .expect("loading the locate object");
        let program: &mut Xdp = ebpf
            .program_mut(LOCATE_PROGRAM)
            .expect("the locate program")
            .try_into()
            .expect("an XDP program");
        program.load().expect("verifying the locate program");
        let config = mapped(ebpf.map("CONFIG").expect("the locate object's CONFIG"));
        let report = mapped(ebpf.map(LOCATE_MAP).expect("the LOCATE map"));
        Self {
            ebpf,
            config,
            report,
        }
    }

    /// What the program computes for `frame` under `profile`: `None` for a
    /// frame that is not IP.
    pub fn locate(&self, frame: &[u8], profile: &FilterProfile) -> Option<LocateReport> {
        self.config.write(&Config {
            profiles: [*profile; cfxdp::PROFILE_COUNT],
            ..Config::default()
        });
        self.report.write(&LocateReport::default());
        let program: &Xdp = self
            .ebpf
            .program(LOCATE_PROGRAM)
            .expect("the locate program")
            .try_into()
            .expect("an XDP program");
        let fd = program.fd().expect("the program's fd");
        run_xdp(fd.as_fd(), frame, 1).expect("BPF_PROG_TEST_RUN");
        let report = self.report.read();
        (report.valid == 1).then_some(report)
    }
}
