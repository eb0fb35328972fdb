# shellcheck shell=bash
# fetch.sh — the model's files: found, downloaded, verified (sourced by deploy/install.sh).
#
# A file is verified when its size and SHA-256 are the manifest's.  The
# manifest entries come from --manifest FILE, then the shipped
# conf/manifests/*.tsv, then DEST/manifest.tsv, where a file no manifest
# knows is recorded the first time it is complete ("computed and recorded on
# first use": later runs hold it to that).  Lines: NAME<TAB>BYTES<TAB>SHA256.
# Hashing 60 GB takes minutes, so a verified file's size and mtime are kept
# in DEST/verified.tsv and a re-run that finds them unchanged trusts it.
# Downloads go to NAME.part with curl (Range: a re-run or a retry continues
# where the bytes stop) and are renamed only once verified; a corrupt file is
# deleted and fetched again.  Needs: say, log, die, DEST, MANIFEST, NEBULA_REPO.

FETCH_TRIES=${FETCH_TRIES:-5}

# manifest_entry NAME: "BYTES SHA256" or nothing.
manifest_entry() {
    local f
    for f in ${MANIFEST:+"$MANIFEST"} "$NEBULA_REPO"/conf/manifests/*.tsv ${DEST:+"$DEST/manifest.tsv"}; do
        [ -r "$f" ] || continue
        awk -F'\t' -v n="$1" '$1 == n && $0 !~ /^#/ { print $2, $3; exit }' "$f" | grep . && return 0
    done
    return 0
}

file_bytes() { stat -L -c %s "$1" 2>/dev/null || echo 0; }

# verify_file PATH NAME: 0 when PATH is NAME as the manifest says (a file no
# manifest knows is hashed and recorded); 1 with the reason in VERIFY_WHY.
verify_file() {
    local path=$1 name=$2 entry bytes sha have mtime got
    have=$(file_bytes "$path")
    mtime=$(stat -L -c '%.9Y:%.9Z' "$path") # to the nanosecond, ctime too: an in-place change within a second shows
    entry=$(manifest_entry "$name")
    bytes=${entry%% *} sha=${entry##* }
    if [ -n "$entry" ] && [ "$have" != "$bytes" ]; then
        VERIFY_WHY="$have bytes, the manifest says $bytes"
        return 1
    fi
    if [ -r "$DEST/verified.tsv" ] &&
        awk -F'\t' -v p="$path" -v s="$have" -v m="$mtime" -v h="$sha" \
            '$1 == p && $2 == s && $3 == m && (h == "" || $4 == h) { f = 1 } END { exit !f }' "$DEST/verified.tsv"; then
        log "$name: verified before (size and mtime unchanged)"
        return 0
    fi
    say "$name: checking its SHA-256 ($(gib_of "$have") GiB)"
    got=$(sha256sum "$path" | cut -d' ' -f1)
    if [ -z "$entry" ]; then
        printf '%s\t%s\t%s\n' "$name" "$have" "$got" >>"$DEST/manifest.tsv"
        say "$name: no published checksum; recorded $got on first use (DEST/manifest.tsv)"
    elif [ "$got" != "$sha" ]; then
        VERIFY_WHY="SHA-256 $got, the manifest says $sha"
        return 1
    fi
    local tmp
    tmp=$(mktemp "$DEST/.verified.XXXXXX")
    { grep -v -F "$path	" "$DEST/verified.tsv" 2>/dev/null || true
      printf '%s\t%s\t%s\t%s\n' "$path" "$have" "$mtime" "$got"; } >"$tmp"
    mv "$tmp" "$DEST/verified.tsv"
    log "$name: verified (sha256 $got)"
    return 0
}

# url_ok URL: https anywhere, http only to this machine (a local mirror, the tests).
url_ok() {
    case $1 in
    https://*) return 0 ;;
    http://127.0.0.1[:/]* | http://localhost[:/]* | http://\[::1\][:/]*) return 0 ;;
    esac
    return 1
}

# remote_bytes URL: Content-Length of a HEAD (after redirects), or nothing.
remote_bytes() {
    curl -fsSIL --max-time 30 "$1" 2>/dev/null | tr -d '\r' | awk 'tolower($1) == "content-length:" { n = $2 } END { if (n != "") print n }'
}

# fetch_url URL NAME: DEST/NAME downloaded and verified (resumed from
# DEST/NAME.part; retried FETCH_TRIES times when the connection drops).
fetch_url() {
    local url=$1 name=$2 out=$DEST/$2 part=$DEST/$2.part entry want try rc
    if [ -e "$out" ]; then
        if verify_file "$out" "$name"; then
            [ -e "$part" ] && rm -f "$part"
            say "$name: already here and verified"
            return 0
        fi
        say "$name: $VERIFY_WHY: deleting it and fetching it again"
        rm -f "$out"
    fi
    entry=$(manifest_entry "$name")
    want=${entry%% *}
    [ -n "$want" ] || want=$(remote_bytes "$url")
    [ -e "$part" ] && say "$name: resuming at $(file_bytes "$part") bytes"
    local progress=(-sS) round
    [ -t 2 ] && progress=(--progress-bar)
    # Two rounds: bytes that fail the checksum (a resumed part of another
    # version, a bad mirror) are deleted and fetched once more from the start.
    for round in 1 2; do
        for ((try = 1; try <= FETCH_TRIES; try++)); do
            if [ -n "$want" ] && [ "$(file_bytes "$part")" -ge "$want" ]; then rc=0; break; fi
            curl --fail --location --retry 0 --continue-at - "${progress[@]}" --output "$part" "$url" && rc=0 || rc=$?
            [ "$rc" = 0 ] && break
            say "$name: the download stopped (curl exit $rc) at $(file_bytes "$part") bytes; resuming (try $((try + 1)) of $FETCH_TRIES)"
            sleep 1
        done
        [ "$rc" = 0 ] || die "$name: the download from $url failed $FETCH_TRIES times (curl exit $rc); run the installer again to resume"
        verify_file "$part" "$name" && break
        rm -f "$part"
        [ "$round" = 2 ] && die "$name: the downloaded file is not the published one twice ($VERIFY_WHY); deleted"
        say "$name: $VERIFY_WHY: deleted; fetching it again from the start"
    done
    mv "$part" "$out"
    # The record names the final path.
    sed -i "s|^$(printf '%s' "$part" | sed 's/[.[\*^$|]/\\&/g')\t|$out\t|" "$DEST/verified.tsv"
    say "$name: downloaded and verified"
}

# gib_of BYTES: one decimal.
gib_of() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1073741824 }'; }
