//! An Ethernet port's received frames, each decided once: a frame of the
//! two bridged VLANs is the bridge's ([`crate::bridge`]); any other frame
//! is offered to the device's own endpoint ([`crate::endpoint`]), if it
//! has one. A board with Ethernet receives a frame, hands it to
//! [`EthernetService::take`] and sends what it is told to.

use embedded_storage::nor_flash::NorFlash;
use filter_core::{BucketStorage, Fingerprint};

use crate::endpoint::MAX_REPLY_LEN;
use crate::{Device, UdpEndpoint, Verdict};

/// What a board's Ethernet port serves.
pub struct EthernetService {
    /// The two VLANs bridged into each other.
    pub bridged_vlans: [u16; 2],
    /// The device's own address, for updates over the network; `None`
    /// when it takes none.
    pub endpoint: Option<UdpEndpoint>,
}

/// What to send back out of the port for a received frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outgoing {
    /// The received frame itself, retagged for the other VLAN.
    Forward,
    /// The reply written into the reply buffer, of this many bytes.
    Reply(usize),
    /// Nothing: the frame was dropped, or is nobody's.
    Nothing,
}

impl EthernetService {
    /// Decides `frame` (without its FCS) with `device`: bridged (and
    /// counted), answered into `reply`, or dropped.
    pub fn take<F, const S: usize, B, Flash>(
        &self,
        device: &mut Device<'_, F, S, B, Flash>,
        frame: &mut [u8],
        reply: &mut [u8; MAX_REPLY_LEN],
    ) -> Outgoing
    where
        F: Fingerprint,
        B: BucketStorage<F, S>,
        Flash: NorFlash,
    {
        match device.bridge_frame(frame, self.bridged_vlans) {
            Verdict::Forward => Outgoing::Forward,
            Verdict::Drop => Outgoing::Nothing,
            Verdict::NotBridged => self
                .endpoint
                .as_ref()
                .and_then(|endpoint| endpoint.answer(device, frame, reply))
                .map_or(Outgoing::Nothing, Outgoing::Reply),
        }
    }
}
