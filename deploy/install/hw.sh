# shellcheck shell=bash
# hw.sh — what the machine has, as key=value lines (sourced by deploy/install.sh).
#
# hw_detect DIR prints the hardware description the installer decides on:
#   gpu_name, gpu_vram_mib, gpu_driver, gpu_cc  the NVIDIA GPU with the most memory (nvidia-smi)
#   gpu_count                                   how many nvidia-smi lists
#   ram_mib                                     physical memory (/proc/meminfo MemTotal)
#   cores, threads                              physical cores and hardware threads (lscpu, else /proc/cpuinfo)
#   avx512, avx2                                yes or no (/proc/cpuinfo flags)
#   disk_free_mib, disk_kind, disk_path         free space and kind (ssd, hdd, removable, unknown) of
#                                               the file system that will hold DIR (df, lsblk)
#   place=DIR FREE_MIB KIND                     (repeated; a hardware file only) the places to choose
#                                               from when no --dest is given (places below)
# A file of the same lines (--hw-file) replaces the detection: the tests fake
# machines with it; keys it leaves out are detected.

# The deepest existing directory of a path (the one df can ask about).
existing_parent() {
    local d=$1
    while [ ! -d "$d" ] && [ "$d" != / ]; do d=$(dirname "$d"); done
    printf '%s\n' "$d"
}

hw_detect() {
    local dir=$1 line best=0 name= drv= cc= count=0
    if command -v nvidia-smi >/dev/null 2>&1; then
        while IFS=, read -r n mem d c; do
            count=$((count + 1))
            mem=${mem// /}
            [[ $mem =~ ^[0-9]+$ ]] || continue
            if [ "$mem" -gt "$best" ]; then best=$mem name=${n# } drv=${d// /} cc=${c// /}; fi
        done < <(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader,nounits 2>/dev/null)
    fi
    echo "gpu_count=$count"
    echo "gpu_name=$name"
    echo "gpu_vram_mib=$best"
    echo "gpu_driver=$drv"
    echo "gpu_cc=$cc"
    echo "ram_mib=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)"
    local cores threads
    threads=$(nproc --all 2>/dev/null || grep -c '^processor' /proc/cpuinfo)
    cores=$(lscpu -p=CORE,SOCKET 2>/dev/null | grep -v '^#' | sort -u | wc -l)
    [ "${cores:-0}" -gt 0 ] || cores=$(awk -F: '/^physical id/ {p=$2} /^core id/ {print p "-" $2}' /proc/cpuinfo | sort -u | wc -l)
    [ "${cores:-0}" -gt 0 ] || cores=$threads
    echo "cores=$cores"
    echo "threads=$threads"
    local flags
    flags=$(grep -m1 '^flags' /proc/cpuinfo)
    [[ $flags == *" avx512f"* ]] && echo avx512=yes || echo avx512=no
    [[ $flags == *" avx2"* ]] && echo avx2=yes || echo avx2=no
    local p
    p=$(existing_parent "$dir")
    echo "disk_path=$p"
    echo "disk_free_mib=$(disk_free_mib "$p")"
    echo "disk_kind=$(disk_kind "$p")"
}

disk_free_mib() { df -Pm "$1" | awk 'NR == 2 {print $4}'; }

# disk_kind DIR: ssd, hdd, removable or unknown — the disk under DIR's file
# system (the partition's parent device), rotational or removable (lsblk).
disk_kind() {
    local kind=unknown dev rota rm pk disk
    dev=$(df -P "$1" | awk 'NR == 2 {print $1}')
    if command -v lsblk >/dev/null 2>&1 && [ -b "$dev" ]; then
        disk=$dev
        pk=$(lsblk -ndo PKNAME "$dev" 2>/dev/null || true)
        [ -n "$pk" ] && disk=/dev/$pk
        read -r rota rm < <(lsblk -ndo ROTA,RM "$disk" 2>/dev/null || true)
        if [ "${rm:-0}" = 1 ]; then kind=removable
        elif [ "${rota:-}" = 0 ]; then kind=ssd
        elif [ "${rota:-}" = 1 ]; then kind=hdd
        fi
    fi
    echo "$kind"
}

# places NAME: where the model NAME may go when no --dest is given, one
# "DIR FREE_MIB KIND" line each, the preferred first: the user's data
# directory, /var/lib/nebula (where the user may write there), then the
# mount point of every other local, writable file system (ext4, xfs, btrfs,
# ...; not /boot, not read-only, not WSL's drvfs /mnt/c), one place per file
# system.  A hardware file's "place=DIR FREE_MIB KIND" lines replace them
# (the tests fake disks with it).
places() {
    local name=$1 fake=${2:-} d p seen=" " dev mnt type opts rest
    if [ -n "$fake" ] && grep -q '^place=' "$fake"; then
        sed -n 's/^place=//p' "$fake"
        return
    fi
    {
        echo "${XDG_DATA_HOME:-$HOME/.local/share}/nebula/models/$name"
        if [ -w /var/lib/nebula ] || { [ ! -e /var/lib/nebula ] && [ -w /var/lib ]; }; then echo "/var/lib/nebula/models/$name"; fi
        while read -r dev mnt type opts rest; do
            case $type in ext2 | ext3 | ext4 | xfs | btrfs | f2fs | zfs | exfat | vfat | ntfs | ntfs3 | fuseblk) ;; *) continue ;; esac
            mnt=$(printf '%b' "$mnt") # /proc/mounts writes a space as \040
            case $mnt in / | /boot | /boot/* | /efi | /snap/* | /var/lib/*) continue ;; esac
            [[ ,$opts, == *,ro,* ]] && continue
            [ -w "$mnt" ] || [ -w "$mnt/nebula" ] || continue
            echo "$mnt/nebula/models/$name"
        done </proc/mounts
    } | while IFS= read -r d; do
        p=$(existing_parent "$d")
        dev=$(stat -c %d "$p" 2>/dev/null) || continue
        [[ $seen == *" $dev "* ]] && continue
        seen+="$dev "
        printf '%s %s %s\n' "$d" "$(disk_free_mib "$p")" "$(disk_kind "$p")"
    done
}

# choose_dest NEED_BYTES: DEST for a run without --dest, among places NAME:
# the one holding an earlier install of NAME, else the first on an internal
# SSD with NEED_BYTES free, else the first of unknown kind with room, else
# the first rotational or removable one with room (said, and ssd_short set
# for --require-ssd), else the first place (the disk check then says the GiB
# missing).  Each place is logged; the choice is said with its reason.
# Faked places (place= lines of HW_FILE) also give the chosen one's facts
# to the hardware description ($HW.p).  Needs NAME, HW, HW_FILE, say, log.
choose_dest() {
    local need=$1 line dir free kind rank first= pick= why= list=
    places "$NAME" "$HW_FILE" >"$HW.places"
    for rank in earlier ssd unknown other; do
        while IFS= read -r line; do
            kind=${line##* } line=${line% *}
            free=${line##* } dir=${line% *}
            if [ "$rank" = earlier ]; then
                [ -n "$first" ] || first=$dir
                log "place: $dir: $kind disk, $free MiB free"
                list+="${list:+, }$dir ($kind, $(gib_of $((free << 20))) GiB free)"
                if [ -e "$dir/install.stamp" ] || [ -e "$dir/prepared" ] || compgen -G "$dir/*.part" >/dev/null; then
                    pick=$dir why="an earlier install of $NAME is there ($kind disk)"
                    break
                fi
                continue
            fi
            [ $((free << 20)) -ge "$need" ] || continue
            case $rank/$kind in
            ssd/ssd) why="an internal SSD with $(gib_of $((free << 20))) GiB free, $(gib_of "$need") GiB needed" ;;
            unknown/unknown) why="$(gib_of $((free << 20))) GiB free, $(gib_of "$need") GiB needed; its disk's kind is unknown (no lsblk answer)" ;;
            other/hdd | other/removable)
                why="$(gib_of $((free << 20))) GiB free; no internal SSD among the places has $(gib_of "$need") GiB free"
                ssd_short="no internal SSD with $(gib_of "$need") GiB free among: $list" ;;
            *) continue ;;
            esac
            pick=$dir
            break
        done <"$HW.places"
        [ -n "$pick" ] && break
    done
    rm -f "$HW.places"
    if [ -z "$pick" ]; then
        pick=$first why="no place has $(gib_of "$need") GiB free"
    fi
    DEST=$pick
    say "models go to $DEST: $why (--dest DIR to choose)"
    if [ -n "$HW_FILE" ] && grep -q '^place=' "$HW_FILE"; then
        grep -F "place=$DEST " "$HW_FILE" | head -n 1 | {
            read -r line
            line=${line#place=}
            printf 'disk_kind=%s\n' "${line##* }"
            line=${line% *}
            printf 'disk_free_mib=%s\ndisk_path=%s\n' "${line##* }" "$DEST"
        } >"$HW.p"
    fi
    return 0
}

# hw_merge FAKE DETECTED: FAKE's lines win, DETECTED gives the rest.
hw_merge() {
    local k
    cat "$1"
    while IFS= read -r line; do
        k=${line%%=*}
        grep -q "^$k=" "$1" || printf '%s\n' "$line"
    done <"$2"
}

# hw_get FILE KEY
hw_get() { sed -n "s/^$2=//p" "$1" | head -n 1; }
