#!/bin/sh
# Installs what the end-to-end tests need from Debian's packages: SIPp (sip-tester), Kamailio
# and its tls module, taskset (util-linux), python3, tshark and dumpcap (the second reader of the
# RFC 7339 values on the wire), and for TLS the openssl command (the tests' certificates) and
# stunnel4 (TLS around SIPp, whose Debian build has none). Used by `make e2e-tools` when one of
# them is missing.
#
# wireshark-common asks whether non-root users may capture; the tests capture as root, so the
# answer is preseeded "no" (no setuid dumpcap) and the install asks nothing.
#
# The kamailio package enables and starts a system service (Debian's default config, listening
# on port 5060). The tests start their own instances, so the service must not run: a
# policy-rc.d that denies every start is put in place for the install when there is none (the
# standard Debian mechanism, honoured by invoke-rc.d and deb-systemd-invoke), and the unit is
# disabled and stopped afterwards in case anything started it anyway.
set -eu

policy=/usr/sbin/policy-rc.d
created=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# temporary, tests/e2e/install-tools.sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  created=1
fi
cleanup() { if [ -n "$created" ]; then rm -f "$policy"; fi; }
trap cleanup EXIT

apt-get update -qq
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sip-tester kamailio kamailio-tls-modules util-linux python3 tshark \
  openssl stunnel4

if command -v systemctl >/dev/null 2>&1; then
  systemctl disable kamailio.service >/dev/null 2>&1 || true  # works offline too (no systemd running)
fi
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  systemctl stop kamailio.service >/dev/null 2>&1 || true
elif [ -x /etc/init.d/kamailio ]; then
  /etc/init.d/kamailio stop >/dev/null 2>&1 || true
fi
sipp -v 2>/dev/null | grep -m1 SIPp || true
kamailio -v | head -1
