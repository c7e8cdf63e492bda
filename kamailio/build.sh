#!/bin/sh
# Builds the loadctl Kamailio module (kamailio/loadctl/) against a Kamailio source and checks that
# that Kamailio's own binary loads it.
#
#   kamailio/build.sh                      # Debian's kamailio 5.6.3-2 -> target/kamailio/
#   kamailio/build.sh --source SRC [--modules "sl tm pv ..."]
#                                          # a Kamailio release -> target/kamailio/VERSION/
#
# The output directory is printed on stdout (everything else goes to stderr).
# SRC is a release tarball (kamailio-X.Y.Z.tar.xz / .tar.gz, as Kamailio publishes them or as
# `git archive` exports a release tag) or an unpacked source tree (copied, never built in place).
# Each build leaves build.json in its output directory: the kamailio binary, its module
# directory, the module built for it and the version, which the e2e tests read
# (LOADCTL_KAMAILIO_BUILD=DIR; default target/kamailio).
#
# Debian (default):
# 1. Debian's source package kamailio=$KAMAILIO_DEB_VERSION through apt, with apt pointed at a
#    deb-src copy of the system's debian.sources and its state kept under target/kamailio/apt
#    (the system's apt configuration and lists are not touched), unpacked with dpkg-source.
# 2. The tree configured as debian/rules configures it (`make cfg`, same variables, the same
#    dpkg-buildflags CFLAGS/LDFLAGS with hardening=+all): the module's compile flags string then
#    equals the core's, which Kamailio's loader compares. The core is never built: Debian's
#    /usr/sbin/kamailio is the binary.
# A release source:
# 1. Unpacked (or copied) under target/kamailio/VERSION/src.
# 2. Configured with prefix target/kamailio/VERSION/install and only the modules the tests load
#    ($RELEASE_MODULES, or --modules: the load gate needs sl tm pv), then the core and those
#    modules built (`make -j all`) and installed.
# Both:
# 3. Only the module is built in the tree (`make modules modules=src/modules/loadctl`), linking
#    target/libloadctl/libloadctl.a (`make lib`) with -Wl,--exclude-libs,ALL and a version
#    script, then stripped.
# 4. Gate: that Kamailio's binary checks a configuration that loads the module by path
#    (`kamailio -c`): a module_version or compile-flags mismatch is refused there.
# 5. Negative control: the same module built with one core flag changed (-DNO_SIG_DEBUG, which
#    enters the compile-flags string) must be refused by the same check, so a pass in step 4
#    means the flags matched, not that the check was skipped.
#
# Steps 1-2 are cached (stamps in the tree); delete the output directory to start over.
set -eu

KAMAILIO_DEB_VERSION=5.6.3-2
KAMAILIO_UPSTREAM=5.6.3
# what tests/e2e loads from a release build (loadctl.cfg, loadctl-kemi.cfg, functions.cfg,
# dispatcher-oc.cfg; tls for test_kamailio_tls.py: it links the system's libssl, libssl-dev)
RELEASE_MODULES="sl tm tmx pv siputils maxfwd xlog textops jsonrpcs app_jsdt kex corex dispatcher rr dialog tls"

root=$(cd "$(dirname "$0")/.." && pwd)
lib=$root/target/libloadctl/libloadctl.a
source=
while [ $# -gt 0 ]; do
  case $1 in
    --source) [ $# -ge 2 ] || { echo "kamailio/build.sh: --source needs a tarball or tree" >&2; exit 2; }
              source=$2; shift 2 ;;
    --modules) [ $# -ge 2 ] || { echo "kamailio/build.sh: --modules needs a list" >&2; exit 2; }
               RELEASE_MODULES=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "kamailio/build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

log() { printf 'kamailio/build.sh: %s\n' "$*" >&2; }
# stdout carries only the output directory (callers read it with $(...)): every command's own
# output (apt-get, dpkg-source, make) goes to stderr, the result to fd 3
exec 3>&1 1>&2

# --- tools -----------------------------------------------------------------------------------
need=
command -v gcc >/dev/null 2>&1 || need="$need gcc"
command -v make >/dev/null 2>&1 || need="$need make"
command -v strip >/dev/null 2>&1 || need="$need binutils"
command -v python3 >/dev/null 2>&1 || need="$need python3"
if [ -z "$source" ]; then
  command -v dpkg-source >/dev/null 2>&1 || need="$need dpkg-dev"
  command -v dpkg-buildflags >/dev/null 2>&1 || need="$need dpkg-dev"
else
  command -v bison >/dev/null 2>&1 || need="$need bison"
  command -v flex >/dev/null 2>&1 || need="$need flex"
  command -v xz >/dev/null 2>&1 || need="$need xz-utils"
  case " $RELEASE_MODULES " in
    *" tls "*) [ -f /usr/include/openssl/ssl.h ] || need="$need libssl-dev" ;;
  esac
fi
if [ -n "$need" ]; then
  log "installing:$need"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need
fi
[ -f "$lib" ] || { log "$lib missing: run 'make lib' first"; exit 1; }

if [ -z "$source" ]; then
  # --- Debian: 1. the source package ---------------------------------------------------------
  out=$root/target/kamailio
  apt_dir=$out/apt
  src_dir=$out/src
  tree=$src_dir/kamailio-$KAMAILIO_UPSTREAM
  version=$KAMAILIO_UPSTREAM
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
  # --- Debian: 2. configure as debian/rules does ---------------------------------------------
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
  kam=/usr/sbin/kamailio
  mpath="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)/kamailio/modules"
  [ -x "$kam" ] || { log "$kam missing: run 'make e2e-tools' (tests/e2e/install-tools.sh)"; exit 1; }
  installed=$(dpkg-query -W -f '${Version}' kamailio 2>/dev/null || true)
  [ "$installed" = "$KAMAILIO_DEB_VERSION" ] || {
    log "installed kamailio is '$installed', built for $KAMAILIO_DEB_VERSION"; exit 1; }
  label="Debian's $kam ($installed)"
else
  # --- a release: 1. unpack or copy ----------------------------------------------------------
  [ -e "$source" ] || { log "--source $source: no such file or directory"; exit 1; }
  source=$(cd "$(dirname "$source")" && pwd)/$(basename "$source")
  if [ -d "$source" ]; then
    defs=$source/src/Makefile.defs
    [ -f "$defs" ] || { log "$source is not a Kamailio source tree (no src/Makefile.defs)"; exit 1; }
    version=$(awk -F' *= *' '/^VERSION *=/{v=$2} /^PATCHLEVEL *=/{p=$2} /^SUBLEVEL *=/{s=$2} END{print v"."p"."s}' "$defs")
  else
    top=$(tar -tf "$source" 2>/dev/null | head -1 | cut -d/ -f1)
    case $top in
      kamailio-[0-9]*) version=${top#kamailio-} ;;
      *) log "$source: not a Kamailio release tarball (its top directory is '$top', expected kamailio-X.Y.Z)"; exit 1 ;;
    esac
  fi
  case $version in
    [0-9]*.[0-9]*.[0-9]*) ;;
    *) log "$source: cannot tell the Kamailio version (read '$version')"; exit 1 ;;
  esac
  out=$root/target/kamailio/$version
  tree=$out/src/kamailio-$version
  inst=$out/install
  if [ ! -f "$tree/.loadctl-extracted" ] || [ "$(cat "$tree/.loadctl-extracted")" != "$source" ]; then
    rm -rf "$out"
    mkdir -p "$out/src"
    if [ -d "$source" ]; then
      log "copying $source"
      cp -a "$source" "$tree"
      rm -f "$tree/.loadctl-configured" "$tree/.loadctl-built"
    else
      log "unpacking $source"
      tar -xf "$source" -C "$out/src"
      [ -d "$tree" ] || { log "$source did not unpack to kamailio-$version/"; exit 1; }
    fi
    echo "$source" > "$tree/.loadctl-extracted"
  fi
  # --- a release: 2. configure, build and install the core and the modules used ---------------
  if [ ! -f "$tree/.loadctl-built" ] || [ "$(cat "$tree/.loadctl-built")" != "$RELEASE_MODULES" ]; then
    log "Kamailio $version: make cfg, make all ($RELEASE_MODULES), make install -> $inst"
    started=$(date +%s)
    (cd "$tree" && make cfg quiet=silent prefix="$inst" group_include=none \
      include_modules="$RELEASE_MODULES" >"$out/cfg.log" 2>&1) || {
      tail -n 30 "$out/cfg.log" >&2; log "make cfg failed ($out/cfg.log)"; exit 1; }
    (cd "$tree" && make -j"$(nproc)" all quiet=silent >"$out/build.log" 2>&1 \
      && make install quiet=silent >>"$out/build.log" 2>&1) || {
      tail -n 30 "$out/build.log" >&2; log "building Kamailio $version failed ($out/build.log)"; exit 1; }
    echo "$RELEASE_MODULES" > "$tree/.loadctl-built"
    log "Kamailio $version built and installed in $(( $(date +%s) - started )) s"
  fi
  kam=$inst/sbin/kamailio
  mpath=$(dirname "$(find "$inst" -path '*/kamailio/modules/tm.so' | head -1)")
  [ -x "$kam" ] && [ -f "$mpath/tm.so" ] || { log "no kamailio binary or modules under $inst"; exit 1; }
  label="Kamailio $version's $kam"
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
fi
log "make modules modules=src/modules/loadctl (Kamailio $version)"
(cd "$tree" && make modules modules=src/modules/loadctl LOADCTL_ROOT="$root" LC_DEFS="$lc_defs" \
  quiet=silent >"$out/module.log" 2>&1) || {
  cat "$out/module.log" >&2; log "the module does not build against Kamailio $version"; exit 1; }
if grep -q 'warning:' "$out/module.log"; then
  grep -B2 -A3 'warning:' "$out/module.log" >&2
  log "the module builds against Kamailio $version with warnings (above)"; exit 1
fi
mkdir -p "$out"
cp "$tree/src/modules/loadctl/loadctl.so" "$out/loadctl.so.new"
# the same build with its symbols, for profiling (perf; tests/e2e/kamailio_module_compare.py --perf)
mkdir -p "$out/unstripped"
cp "$out/loadctl.so.new" "$out/unstripped/loadctl.so"
strip --strip-unneeded "$out/loadctl.so.new"
# renamed into place: a Kamailio that has the old file mapped, or a copy being made of it, keeps
# a whole file
mv -f "$out/loadctl.so.new" "$out/loadctl.so"
exported=$(nm -D --defined-only "$out/loadctl.so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exported" = "exports mod_register module_flags module_interface_ver module_version " ] || {
  log "unexpected dynamic symbols: $exported"; exit 1; }
log "built $out/loadctl.so ($(wc -c < "$out/loadctl.so") bytes)"

# --- 4. the load gate ------------------------------------------------------------------------
cfg=$out/gate.cfg
cat > "$cfg" <<EOF
#!KAMAILIO
# written by kamailio/build.sh: $label loads the module built here
log_stderror=yes
children=1
listen=udp:127.0.0.1:5060
mpath="$mpath/"
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
log "gate: $label -c loads $out/loadctl.so: config file ok"

# --- 5. negative control ---------------------------------------------------------------------
mod=$tree/src/modules/loadctl
rm -f "$mod"/*.o "$mod"/*.d "$mod"/loadctl.so
(cd "$tree" && make modules modules=src/modules/loadctl LOADCTL_ROOT="$root" \
  LC_DEFS="$lc_defs -DNO_SIG_DEBUG" quiet=silent >/dev/null 2>&1)
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

# --- what the e2e tests read -----------------------------------------------------------------
python3 - "$out/build.json" "$version" "$kam" "$mpath" "$out/loadctl.so" "$label" <<'EOF'
import json, sys
path, version, kam, mpath, module, label = sys.argv[1:]
json.dump({"version": version, "kamailio": kam, "mpath": mpath, "module": module, "label": label},
          open(path, "w"), indent=2)
EOF
log "wrote $out/build.json"
echo "$out" >&3
