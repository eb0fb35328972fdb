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
    local p kind=unknown dev
    p=$(existing_parent "$dir")
    echo "disk_path=$p"
    echo "disk_free_mib=$(df -Pm "$p" | awk 'NR == 2 {print $4}')"
    dev=$(df -P "$p" | awk 'NR == 2 {print $1}')
    if command -v lsblk >/dev/null 2>&1 && [ -b "$dev" ]; then
        # The disk under the partition (or the device itself): rotational, removable?
        local rota rm pk disk=$dev
        pk=$(lsblk -ndo PKNAME "$dev" 2>/dev/null || true)
        [ -n "$pk" ] && disk=/dev/$pk
        read -r rota rm < <(lsblk -ndo ROTA,RM "$disk" 2>/dev/null || true)
        if [ "${rm:-0}" = 1 ]; then kind=removable
        elif [ "${rota:-}" = 0 ]; then kind=ssd
        elif [ "${rota:-}" = 1 ]; then kind=hdd
        fi
    fi
    echo "disk_kind=$kind"
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
