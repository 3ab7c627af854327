# Fail2Ban action for cfctl: a jail's bans become entries of source
# fail2ban:JAIL in the XDP blocklist, unlisted by cfctl itself when the
# ban's time is over (bantime = -1: never). An unban deletes the jail's
# listing only; an address another source lists (cfctl add, a feed,
# CrowdSec) stays listed by that source. A ban that fail2ban prolongs
# (bantime.increment) renews the entry's expiry. Stopping the jail
# withdraws its own entries and nothing else; fail2ban bans them again
# from its database when the jail starts.
#
# The action runs in fail2ban's server and keeps one `cfctl batch` per
# jail: each ban is a line to it, applied (store and live filter) before
# the ban returns, with no shell or process started per ban. The batch
# holds cfctl's store only while it applies lines, so other cfctl commands
# and the agent run beside it. A batch that ended is started again at the
# next ban.
#
# Install:  cp cfctl.py /etc/fail2ban/action.d/
# and in /etc/fail2ban/jail.local (all jails, or one):
#   [DEFAULT]
#   banaction = cfctl.py
#   banaction_allports = cfctl.py
# The blocklist must be attached (cfctl attach IFACE, or the unit
# cfctl-attach@IFACE); fail2ban runs as root. Other directories than
# cfctl's defaults:
#   action = cfctl.py[cfctl="cfctl --state-dir /srv/cfctl --pin-dir /sys/fs/bpf/edge"]

import math
import shlex
import subprocess
import threading

from fail2ban.server.action import ActionBase


class CfctlAction(ActionBase):
    """Bans and unbans through a long-running `cfctl batch`."""

    def __init__(self, jail, name, cfctl="cfctl", **_ignored):
        # `banaction = cfctl.py` also passes port, protocol and chain, which
        # mean nothing to a blocklist of source addresses.
        super().__init__(jail, name)
        self._command = shlex.split(cfctl)
        self._source = "fail2ban:%s" % jail.name
        self._lock = threading.Lock()
        self._batch = None

    @property
    def _prolongable(self):
        return True

    def start(self):
        with self._lock:
            self._start_batch()

    def stop(self):
        with self._lock:
            self._end_batch()

    def reload(self, cfctl="cfctl", **_ignored):
        command = shlex.split(cfctl)
        with self._lock:
            if command != self._command:
                self._end_batch()
                self._command = command

    def flush(self):
        """Withdraws every entry of the jail's source (fail2ban's unban of
        all its tickets, and a stopping jail's)."""
        self._apply("import --replace --source %s /dev/null" % self._source)
        return True

    def ban(self, aInfo):
        line = "add %s --source %s" % (shlex.quote(str(aInfo["ip"])), self._source)
        bantime = aInfo["bantime"]
        if bantime is not None and bantime > 0:
            line += " --timeout %ds" % math.ceil(bantime)
        self._apply(line)

    def prolong(self, aInfo):
        # Adding again renews the listing with the new expiry.
        self.ban(aInfo)

    def unban(self, aInfo):
        self._apply("del %s --source %s" % (shlex.quote(str(aInfo["ip"])), self._source))

    def _apply(self, line):
        """Sends `line` to the batch and waits for its answer; raises the
        error cfctl answers with. A batch found ended is started once more
        and given the line again (an add or a delete done twice is done
        once)."""
        with self._lock:
            for attempt in (1, 2):
                if self._batch is None or self._batch.poll() is not None:
                    self._start_batch()
                try:
                    self._batch.stdin.write(line + "\n")
                    self._batch.stdin.flush()
                    answer = self._batch.stdout.readline()
                except (BrokenPipeError, OSError):
                    answer = ""
                if answer:
                    break
                status = self._batch.wait()
                self._batch = None
                if attempt == 2:
                    raise RuntimeError("cfctl batch ended (exit status %s)" % status)
                self._logSys.warning("cfctl batch ended (exit status %s); starting it again", status)
        answer = answer.rstrip("\n")
        if not answer.startswith("ok:"):
            raise RuntimeError("cfctl: %s" % answer.removeprefix("error: "))

    def _start_batch(self):
        self._end_batch()
        self._batch = subprocess.Popen(
            self._command + ["batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        threading.Thread(
            target=self._log_warnings, args=(self._batch.stderr,), daemon=True
        ).start()

    def _log_warnings(self, stderr):
        """cfctl's warnings and notices (each line starts with `cfctl:`)
        into fail2ban's log."""
        for line in stderr:
            self._logSys.warning("[%s] %s", self._jail.name, line.rstrip("\n"))

    def _end_batch(self):
        if self._batch is None:
            return
        batch, self._batch = self._batch, None
        try:
            batch.stdin.close()
        except OSError:
            pass
        try:
            batch.wait(timeout=30)
        except subprocess.TimeoutExpired:
            batch.kill()
            batch.wait()


Action = CfctlAction
