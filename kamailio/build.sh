#!/bin/sh
# Builds the loadctl Kamailio module (kamailio/loadctl/) against Debian's Kamailio source, so
# Debian's own kamailio binary loads it, and checks that it does.
#
#   kamailio/build.sh            # -> target/kamailio/loadctl.so (stripped), then the load gate
#
# 1. Debian's source package kamailio=$KAMAILIO_DEB_VERSION through apt, with apt pointed at a
#    deb-src copy of the system's debian.sources and its state kept under target/kamailio/apt
#    (the system's apt configuration and lists are not touched), unpacked with dpkg-source.
# 2. The tree configured as debian/rules configures it (`make cfg`, same variables, the same
#    dpkg-buildflags CFLAGS/LDFLAGS with hardening=+all): the module's compile flags string then
#    equals the core's, which Kamailio's loader compares.
# 3. Only the module is built (`make modules modules=src/modules/loadctl`, about a second; the
#    core is never built), linking target/libloadctl/libloadctl.a (`make lib`) with
#    -Wl,--exclude-libs,ALL and a version script, then stripped.
# 4. Gate: Debian's /usr/sbin/kamailio checks a configuration that loads the module by path
#    (`kamailio -c`): a module_version or compile-flags mismatch is refused there.
# 5. Negative control: the same module built with one core flag changed (-DNO_SIG_DEBUG, which
#    enters the compile-flags string) must be refused by the same check, so a pass in step 4
#    means the flags matched, not that the check was skipped.
#
# Steps 1-2 are cached in target/kamailio (stamps); delete that directory to start over.
set -eu

KAMAILIO_DEB_VERSION=5.6.3-2
KAMAILIO_UPSTREAM=5.6.3

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/target/kamailio
apt_dir=$out/apt
src_dir=$out/src
tree=$src_dir/kamailio-$KAMAILIO_UPSTREAM
lib=$root/target/libloadctl/libloadctl.a

log() { printf 'kamailio/build.sh: %s\n' "$*" >&2; }

# --- tools -----------------------------------------------------------------------------------
need=
command -v dpkg-source >/dev/null 2>&1 || need="$need dpkg-dev"
command -v dpkg-buildflags >/dev/null 2>&1 || need="$need dpkg-dev"
command -v gcc >/dev/null 2>&1 || need="$need gcc"
command -v make >/dev/null 2>&1 || need="$need make"
command -v strip >/dev/null 2>&1 || need="$need binutils"
if [ -n "$need" ]; then
  log "installing:$need"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi
[ -f "$lib" ] || { log "$lib missing: run 'make lib' first"; exit 1; }

# --- 1. the source package -------------------------------------------------------------------
if [ ! -f "$tree/.loadctl-extracted" ]; then
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$src_dir"
  sources=/etc/apt/sources.list.d/debian.sources
  [ -f "$sources" ] || { log "$sources not found (expected a deb822 Debian system)"; exit 1; }
  sed 's/^Types:.*/Types: deb-src/' "$sources" > "$apt_dir/deb-src.sources"
  set -- -o "Dir::Etc::sourcelist=$apt_dir/deb-src.sources" -o Dir::Etc::SourceParts=/dev/null \
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root
  log "apt-get update (deb-src lists in $apt_dir)"
  apt-get -qq "$@" update
  rm -rf "$tree"
  (cd "$src_dir" && apt-get -qq "$@" source --download-only "kamailio=$KAMAILIO_DEB_VERSION")
  (cd "$src_dir" && dpkg-source -x "kamailio_$KAMAILIO_DEB_VERSION.dsc" "$tree" >/dev/null)
  touch "$tree/.loadctl-extracted"
  rm -f "$tree/.loadctl-configured"
fi

# --- 2. configure as debian/rules does -------------------------------------------------------
if [ ! -f "$tree/.loadctl-configured" ]; then
  export DEB_BUILD_MAINT_OPTIONS=hardening=+all
  cc_extra="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CFLAGS) -DVERSION_NODATE"
  ld_extra="$(dpkg-buildflags --get LDFLAGS)"
  multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
  log "make cfg (FLAVOUR=kamailio group_include=kstandard LIBDIR=lib/$multiarch)"
  (cd "$tree" && make cfg quiet=silent prefix=/usr cfg_target=/etc/kamailio/ FLAVOUR=kamailio \
    BASEDIR="$tree/debian/kamailio" cfg_prefix="$tree/debian/kamailio" \
    CC_EXTRA_OPTS="$cc_extra" LD_EXTRA_OPTS="$ld_extra" \
    skip_modules="bdb dbtext dnssec iptrtpproxy java mi_xmlrpc oracle pa purple" \
    group_include=kstandard LIBDIR="lib/$multiarch" >/dev/null)
  touch "$tree/.loadctl-configured"
fi

# --- 3. the module only ----------------------------------------------------------------------
rm -rf "$tree/src/modules/loadctl"
mkdir -p "$tree/src/modules/loadctl"
cp "$root"/kamailio/loadctl/Makefile "$root"/kamailio/loadctl/*.c "$root"/kamailio/loadctl/*.h \
  "$root"/kamailio/loadctl/loadctl.map "$tree/src/modules/loadctl/"
# The shared-cell ABI (one limit across Kamailio's processes) is used when the header has it.
lc_defs=
if grep -q 'lc_engine_new_shared' "$root/include/loadctl.h"; then
  lc_defs=-DLC_HAVE_SHARED_CELLS
  log "include/loadctl.h has the shared-cell ABI: building with $lc_defs"
fi
log "make modules modules=src/modules/loadctl"
(cd "$tree" && make modules modules=src/modules/loadctl LOADCTL_ROOT="$root" LC_DEFS="$lc_defs" \
  quiet=silent >/dev/null)
cp "$tree/src/modules/loadctl/loadctl.so" "$out/loadctl.so"
# the same build with its symbols, for profiling (perf; tests/e2e/kamailio_module_compare.py --perf)
mkdir -p "$out/unstripped"
cp "$out/loadctl.so" "$out/unstripped/loadctl.so"
strip --strip-unneeded "$out/loadctl.so"
exported=$(nm -D --defined-only "$out/loadctl.so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exported" = "exports mod_register module_flags module_interface_ver module_version " ] || {
  log "unexpected dynamic symbols: $exported"; exit 1; }
log "built $out/loadctl.so ($(wc -c < "$out/loadctl.so") bytes)"

# --- 4. the load gate ------------------------------------------------------------------------
kam=/usr/sbin/kamailio
[ -x "$kam" ] || { log "$kam missing: run 'make e2e-tools' (tests/e2e/install-tools.sh)"; exit 1; }
installed=$(dpkg-query -W -f '${Version}' kamailio 2>/dev/null || true)
[ "$installed" = "$KAMAILIO_DEB_VERSION" ] || {
  log "installed kamailio is '$installed', built for $KAMAILIO_DEB_VERSION"; exit 1; }
cfg=$out/gate.cfg
cat > "$cfg" <<EOF
#!KAMAILIO
# written by kamailio/build.sh: Debian's kamailio loads the module built here
log_stderror=yes
children=1
listen=udp:127.0.0.1:5060
mpath="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/kamailio/modules/"
loadmodule "sl.so"
loadmodule "tm.so"
loadmodule "pv.so"
loadmodule "$out/loadctl.so"
modparam("loadctl", "max_rules", 100)
request_route {
	if (lc_classify() != 1) {
		lc_reply();
		exit;
	}
	exit;
}
EOF
if ! "$kam" -c -f "$cfg" > "$out/gate.log" 2>&1 || ! grep -q "config file ok" "$out/gate.log"; then
  cat "$out/gate.log" >&2
  log "GATE FAILED: $kam refused the module"
  exit 1
fi
log "gate: $kam ($installed) -c loads $out/loadctl.so: config file ok"

# --- 5. negative control ---------------------------------------------------------------------
mod=$tree/src/modules/loadctl
rm -f "$mod"/*.o "$mod"/*.d "$mod"/loadctl.so
(cd "$tree" && make modules modules=src/modules/loadctl LOADCTL_ROOT="$root" \
  LC_DEFS="$lc_defs -DNO_SIG_DEBUG" quiet=silent >/dev/null)
mkdir -p "$out/mismatch"
cp "$mod/loadctl.so" "$out/mismatch/loadctl.so"
rm -f "$mod"/*.o "$mod"/*.d "$mod"/loadctl.so
sed "s|$out/loadctl.so|$out/mismatch/loadctl.so|" "$cfg" > "$out/mismatch/gate.cfg"
if "$kam" -c -f "$out/mismatch/gate.cfg" > "$out/mismatch/gate.log" 2>&1 \
    || ! grep -q "module compile flags mismatch" "$out/mismatch/gate.log"; then
  cat "$out/mismatch/gate.log" >&2
  log "NEGATIVE CONTROL FAILED: $kam did not refuse a module built with different flags"
  exit 1
fi
log "negative control: a module built with -DNO_SIG_DEBUG is refused (module compile flags mismatch)"
