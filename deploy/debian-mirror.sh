# Sourced by deploy/bootstrap.sh and deploy/local/debian-root.sh: the Debian mirror this machine's apt
# sources already use (deb822 .sources files first, then one-line .list files), security archives aside.
debian_mirror() {
    local uri
    uri=$(grep -hE '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
        awk '{print $2}' | grep -v -- '-security' | grep -m1 -E '/debian/?$' || true)
    if [ -z "$uri" ]; then
        uri=$(grep -hE '^\s*deb\s' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
            awk '{for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' |
            grep -v -- '-security' | head -n1 || true)
    fi
    [ -n "$uri" ] || { echo "cannot find the Debian mirror in the apt sources" >&2; return 1; }
    echo "${uri%/}"
}
