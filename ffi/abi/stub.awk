# Reads include/loadctl.h and prints, for `make abi-dump`, a C file that defines every function
# the header declares, with the header's own prototype and a trapping body, and the helper types
# below; compiled with -g it is a stand-in libloadctl.so.MAJOR whose DWARF describes the C ABI
# exactly as a C caller sees it (why not the Rust library itself: ffi/abi/README.md). With
# `-v names=1` it prints only the function names, one a line (`make symbols-check` compares them
# with what the library exports).
BEGIN { if (!names) { print "#include \"loadctl.h\""; print "" } }
# Numeric `#define`s (codes, flags, limits) are not in DWARF: each becomes the one enumerator
# of an `enum lc_abi_NAME` (`abi_NAME = NAME`), so a changed, removed or added value is a
# changed, removed or added type. One enum each: abidiff overlooks a value change inside one
# enum when both the old and the new value also belong to other enumerators of it. The version
# macros change with every release and are left out (cargo test checks them).
/^#define LC_[A-Z0-9_]+ [^"]/ && $2 !~ /^LC_VERSION(_MAJOR|_MINOR|_PATCH|_NUMBER)?$/ {
    extra = extra "enum lc_abi_" $2 " { abi_" $2 " = " $2 " };\n"
}
# A scalar typedef (`typedef uint32_t lc_transport;`) that no function or struct uses yet is not
# compared by abidiff; a one-member struct `lc_abi_typedef_NAME` makes its retyping visible.
/^typedef [A-Za-z0-9_ ]+ lc_[a-z0-9_]+;$/ && $2 !~ /^(struct|union|enum)$/ {
    name = $NF; sub(/;$/, "", name)
    extra = extra "struct lc_abi_typedef_" name " { " name " value; };\n"
}
/^extern "C" \{/ { body = 1; next }
/^}  *\/\/ extern "C"/ { body = 0 }
!body { next }
/^[ \t]*(\/\/|#|$)/ { next }
{
    decl = decl $0 "\n"
    if ($0 ~ /\);[ \t]*$/) {
        if (names) {
            match(decl, /[A-Za-z_][A-Za-z0-9_]*\(/)
            print substr(decl, RSTART, RLENGTH - 1)
        } else {
            sub(/;[ \t]*\n$/, " {\n  __builtin_trap();\n}\n", decl)
            printf "%s\n", decl
        }
        decl = ""
        count++
    }
}
END {
    if (!names) printf "%s", extra
    if (decl != "") { print "stub.awk: unterminated declaration: " decl > "/dev/stderr"; exit 1 }
    if (count == 0) { print "stub.awk: no function declarations found" > "/dev/stderr"; exit 1 }
}
