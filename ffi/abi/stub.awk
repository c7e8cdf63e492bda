# Reads include/loadctl.h and prints, for `make abi-check`, a C file defining every function the
# header declares with the header's own prototype and a trapping body; compiled with -g it is a
# stand-in libloadctl.so.0 whose DWARF describes the C ABI exactly as a C caller sees it (why not
# the Rust library itself: ffi/abi/README.md). With `-v names=1` it prints only the function
# names, one a line (`make symbols-check` compares them with what the library exports).
BEGIN { if (!names) { print "#include \"loadctl.h\""; print "" } }
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
    if (decl != "") { print "stub.awk: unterminated declaration: " decl > "/dev/stderr"; exit 1 }
    if (count == 0) { print "stub.awk: no function declarations found" > "/dev/stderr"; exit 1 }
}
