//! What holds an interface's XDP hook ([`HookHolder::of`]), asked through
//! rtnetlink, which reports the program whether a BPF link put it there or
//! netlink did (as `ip link` and libxdp do), so that a refused attach can
//! name the program in the way.

use std::fmt;
use std::io;

use aya::programs::{loaded_programs, ProgramType};
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_route::link::{LinkAttribute, LinkMessage, LinkXdp};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// The name libxdp gives its multi-program dispatcher.
const LIBXDP_DISPATCHER: &str = "xdp_dispatcher";

/// The program on an interface's XDP hook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HookHolder {
    /// Its kernel id.
    pub id: u32,
    /// Its name (at most 15 bytes, as the kernel keeps it), if it is still
    /// loaded.
    pub name: Option<String>,
}

impl HookHolder {
    /// The program on interface `if_index`'s XDP hook, if there is one.
    pub fn of(if_index: u32) -> io::Result<Option<Self>> {
        let Some(id) = xdp_program_id(if_index)? else {
            return Ok(None);
        };
        let name = loaded_programs()
            .filter_map(Result::ok)
            .find(|program| program.id() == id)
            .and_then(|program| program.name_as_str().map(str::to_owned));
        Ok(Some(Self { id, name }))
    }
}

/// `program 17 (xdpfilt_alw_all)`, and for libxdp's dispatcher, or for a
/// libxdp program alone on a kernel that cannot run the dispatcher, what
/// that means for sharing the hook.
impl fmt::Display for HookHolder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "program {}", self.id)?;
        match self.name.as_deref() {
            Some(LIBXDP_DISPATCHER) => write!(
                f,
                " (libxdp's multi-program dispatcher, which cfctl does not join: its programs \
                 keep the hook)"
            ),
            Some(name) if !extensions_supported() => write!(
                f,
                " ({name}; this kernel cannot load freplace extensions, so libxdp's \
                 dispatcher cannot share the hook here either)"
            ),
            Some(name) => write!(f, " ({name})"),
            None => Ok(()),
        }
    }
}

/// Whether this kernel loads `BPF_PROG_TYPE_EXT` programs, which libxdp's
/// dispatcher is made of.
fn extensions_supported() -> bool {
    aya::sys::is_program_supported(ProgramType::Extension).unwrap_or(false)
}

/// The id of the program on interface `if_index`'s XDP hook, if any.
fn xdp_program_id(if_index: u32) -> io::Result<Option<u32>> {
    let mut link = LinkMessage::default();
    link.header.index = if_index;
    let RouteNetlinkMessage::NewLink(link) = request(RouteNetlinkMessage::GetLink(link))? else {
        return Err(io::Error::other(
            "rtnetlink answered RTM_GETLINK without a link",
        ));
    };
    Ok(link
        .attributes
        .into_iter()
        .filter_map(|attribute| match attribute {
            LinkAttribute::Xdp(xdp) => Some(xdp),
            _ => None,
        })
        .flatten()
        .find_map(|value| match value {
            LinkXdp::ProgId(id) if id != 0 => Some(id),
            _ => None,
        }))
}

/// Sends `message` and reads the kernel's answer to it; an error for an
/// error.
fn request(message: RouteNetlinkMessage) -> io::Result<RouteNetlinkMessage> {
    const SEQUENCE: u32 = 1;
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut packet = NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(message));
    packet.header.flags = NLM_F_REQUEST;
    packet.header.sequence_number = SEQUENCE;
    packet.finalize();
    let mut buffer = vec![0; packet.buffer_len()];
    packet.serialize(&mut buffer);
    socket.send(&buffer, 0)?;
    let mut answer = Vec::with_capacity(16 * 1024);
    loop {
        answer.clear();
        let size = socket.recv(&mut answer, 0)?;
        let mut offset = 0;
        while offset < size {
            let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&answer[offset..size])
                .map_err(|error| {
                io::Error::other(format!("unreadable rtnetlink answer: {error}"))
            })?;
            let length = reply.header.length as usize;
            if reply.header.sequence_number == SEQUENCE {
                match reply.payload {
                    NetlinkPayload::Error(error) => return Err(error.to_io()),
                    NetlinkPayload::InnerMessage(inner) => return Ok(inner),
                    _ => {}
                }
            }
            if length == 0 {
                break;
            }
            offset += length;
        }
    }
}
