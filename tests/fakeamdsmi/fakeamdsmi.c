/*
 * A stand-in libamd_smi.so for tests: the real `amdsmi` Python package (from PyPI) loads it with
 * ctypes from $ROCM_PATH/lib/libamd_smi.so and goes through its real path — every symbol resolved at
 * import, its own struct layouts, status codes — with no AMD GPU and no amdgpu driver.
 *
 * Built by tests/fakeamdsmi/gen.py, which adds stubs.c (every other symbol of the installed wrapper,
 * answering AMDSMI_STATUS_NOT_SUPPORTED) and layout.h (`L_<struct>_<field>` = offset, size of each field
 * written here, read from that version's ctypes structures; offset -1 = the field does not exist there).
 *
 * Config: $FAKE_AMDSMI_CONFIG, one record per line, TAB-separated key=value fields after the kind;
 * re-read whenever its inode, size or mtime changes (tests replace it atomically), so a test can add
 * the PIDs of its children, or lose a GPU, while a tracker runs.
 *
 *   device  name=...  uuid=...  bdf=0000:c1:00.0  total=BYTES  used=BYTES  gfx=PCT  umc=PCT  mm=PCT
 *           temp_edge=C  temp_hotspot=C  power_w=W  avg_power_w=W  limit_w=W  gfx_clock=MHZ
 *           mem_clock=MHZ  energy=TICKS  partition=SPX|CPX|...  partition_id=N  hip_uuid=GPU-...
 *           hip_id=N  lost=0|1  lost_code=STATUS
 *   process dev=DEVICE_INDEX  pid=PID  vram=BYTES  gtt=BYTES  gfx_ns=NS  name=...
 *   error   fn=SYMBOL  dev=DEVICE_INDEX|-1  code=AMDSMI_STATUS
 *
 * A numeric field given as NA (or left out) answers AMDSMI_STATUS_NOT_SUPPORTED (in a struct: the
 * N/A value amdsmi uses, 0xFFFF for activity and power). energy is the counter at amdsmi_init in ticks
 * of ENERGY_RESOLUTION_UJ; it then grows by power_w x seconds, as a real GPU's would. lost=1 makes every
 * query of that device answer lost_code (default AMDSMI_STATUS_NOT_FOUND). With no config file,
 * amdsmi_init answers AMDSMI_STATUS_DRIVER_NOT_LOADED. $FAKE_AMDSMI_PRINT, when set, is printed to stdout
 * by amdsmi_init (through stdio's buffer, as a chatty library would). $FAKE_AMDSMI_LOG, when set, gets a line
 * `procs DEV N` each time a process list with N > 0 entries is served and `lost DEV` each time a lost
 * device is queried, so a test waits on what the tracker has read instead of sleeping.
 * $FAKE_AMDSMI_SLEEP="SYMBOL=SECONDS[,SYMBOL=SECONDS...]" makes every call of SYMBOL (amdsmi_init too) sleep that
 * long, or never return with SECONDS = hang: a driver that hangs.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int amdsmi_status_t;

#define ST_SUCCESS 0
#define ST_INVAL 1
#define ST_NOT_SUPPORTED 2
#define ST_NOT_FOUND 31
#define ST_NOT_INIT 32
#define ST_DRIVER_NOT_LOADED 34
#define ST_OUT_OF_RESOURCES 15

#define NA (-1LL)
#define MAXDEV 16
#define MAXPROC 256
#define MAXERR 32
#define ENERGY_RESOLUTION_UJ 15.259f

typedef struct {
    int index;
    char name[128], uuid[64], bdf[32], partition[16], hip_uuid[64];
    long long total, used, gfx, umc, mm, temp_edge, temp_hotspot, power_w, avg_power_w, limit_w, gfx_clock,
        mem_clock, energy, partition_id, hip_id, lost, lost_code;
} dev_t_;

typedef struct {
    int dev, pid;
    long long vram, gtt, gfx_ns;
    char name[64];
} proc_t_;

typedef struct {
    char fn[64];
    int dev, code;
} err_t_;

static dev_t_ devs[MAXDEV];
static proc_t_ procs[MAXPROC];
static err_t_ errs[MAXERR];
static int ndev, nproc, nerr, initialized;
static double t_init;
static struct stat last_st;
static int have_st;
static char socket_token;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long num(const char *v) { return strcmp(v, "NA") == 0 ? NA : strtoll(v, NULL, 10); }

static void dev_defaults(dev_t_ *d) {
    memset(d, 0, sizeof *d);
    long long *f[] = {&d->total, &d->used, &d->gfx, &d->umc, &d->mm, &d->temp_edge, &d->temp_hotspot,
                      &d->power_w, &d->avg_power_w, &d->limit_w, &d->gfx_clock, &d->mem_clock, &d->energy,
                      &d->partition_id, &d->hip_id};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = NA;
    d->lost_code = ST_NOT_FOUND;
}

static void set_dev_field(dev_t_ *d, const char *k, const char *v) {
    if (!strcmp(k, "name")) snprintf(d->name, sizeof d->name, "%s", v);
    else if (!strcmp(k, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", v);
    else if (!strcmp(k, "bdf")) snprintf(d->bdf, sizeof d->bdf, "%s", v);
    else if (!strcmp(k, "partition")) snprintf(d->partition, sizeof d->partition, "%s", v);
    else if (!strcmp(k, "hip_uuid")) snprintf(d->hip_uuid, sizeof d->hip_uuid, "%s", v);
#define F(n) else if (!strcmp(k, #n)) d->n = num(v);
    F(total) F(used) F(gfx) F(umc) F(mm) F(temp_edge) F(temp_hotspot) F(power_w) F(avg_power_w) F(limit_w)
    F(gfx_clock) F(mem_clock) F(energy) F(partition_id) F(hip_id) F(lost) F(lost_code)
#undef F
}

static void set_proc_field(proc_t_ *p, const char *k, const char *v) {
    if (!strcmp(k, "dev")) p->dev = atoi(v);
    else if (!strcmp(k, "pid")) p->pid = atoi(v);
    else if (!strcmp(k, "vram")) p->vram = num(v);
    else if (!strcmp(k, "gtt")) p->gtt = num(v);
    else if (!strcmp(k, "gfx_ns")) p->gfx_ns = num(v);
    else if (!strcmp(k, "name")) snprintf(p->name, sizeof p->name, "%s", v);
}

static void load_config(void) {
    const char *path = getenv("FAKE_AMDSMI_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (have_st && st.st_ino == last_st.st_ino && st.st_size == last_st.st_size &&
        st.st_mtim.tv_sec == last_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == last_st.st_mtim.tv_nsec)
        return;
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    last_st = st;
    have_st = 1;
    ndev = nproc = nerr = 0;
    char line[4096];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        char *save = NULL;
        char *kind = strtok_r(line, "\t", &save);
        if (!kind || kind[0] == '#') continue;
        dev_t_ *d = NULL;
        proc_t_ *p = NULL;
        err_t_ *e = NULL;
        if (!strcmp(kind, "device") && ndev < MAXDEV) {
            d = &devs[ndev];
            dev_defaults(d);
            d->index = ndev++;
        } else if (!strcmp(kind, "process") && nproc < MAXPROC) {
            p = &procs[nproc++];
            memset(p, 0, sizeof *p);
        } else if (!strcmp(kind, "error") && nerr < MAXERR) {
            e = &errs[nerr++];
            memset(e, 0, sizeof *e);
            e->dev = -1;
        } else {
            continue;
        }
        char *tok;
        while ((tok = strtok_r(NULL, "\t", &save))) {
            char *eq = strchr(tok, '=');
            if (!eq) continue;
            *eq = 0;
            const char *k = tok, *v = eq + 1;
            if (d) set_dev_field(d, k, v);
            else if (p) set_proc_field(p, k, v);
            else if (!strcmp(k, "fn")) snprintf(e->fn, sizeof e->fn, "%s", v);
            else if (!strcmp(k, "dev")) e->dev = atoi(v);
            else if (!strcmp(k, "code")) e->code = atoi(v);
        }
    }
    fclose(fp);
}

static void log_line(const char *fmt, ...) {
    const char *path = getenv("FAKE_AMDSMI_LOG");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
}

static amdsmi_status_t injected(const char *fn, int dev) {
    for (int i = 0; i < nerr; i++)
        if (!strcmp(errs[i].fn, fn) && (errs[i].dev < 0 || errs[i].dev == dev)) return errs[i].code;
    return ST_SUCCESS;
}

/* $FAKE_AMDSMI_SLEEP: sleep (or hang) in `fn`. */
static void stall(const char *fn) {
    const char *spec = getenv("FAKE_AMDSMI_SLEEP");
    size_t n = strlen(fn);
    for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
        if (strncmp(p, fn, n) || p[n] != '=') continue;
        if (!strncmp(p + n + 1, "hang", 4))
            for (;;) sleep(3600);
        double secs = atof(p + n + 1);
        struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
        while (nanosleep(&ts, &ts) != 0) {
        }
        return;
    }
}

/* Resolve a handle, apply lost/injected errors. */
static amdsmi_status_t enter(const char *fn, void *handle, dev_t_ **out) {
    if (!initialized) return ST_NOT_INIT;
    stall(fn);
    load_config();
    dev_t_ *d = (dev_t_ *)handle;
    if (!(d >= devs && d < devs + ndev)) return ST_INVAL;
    if (d->lost == 1) {
        log_line("lost %d\n", d->index);
        return (amdsmi_status_t)d->lost_code;
    }
    amdsmi_status_t e = injected(fn, d->index);
    if (e) return e;
    *out = d;
    return ST_SUCCESS;
}

#define ENTER(h)                                   \
    dev_t_ *d = NULL;                              \
    amdsmi_status_t rc_ = enter(__func__, h, &d);  \
    if (rc_) return rc_;

/* write an unsigned value into a field of `size` bytes at `off` (a field missing in this version: nothing) */
static void put(void *base, int off, int size, unsigned long long v) {
    if (off < 0 || !base) return;
    char *p = (char *)base + off;
    switch (size) {
    case 1: *(uint8_t *)p = (uint8_t)v; break;
    case 2: *(uint16_t *)p = (uint16_t)v; break;
    case 4: *(uint32_t *)p = (uint32_t)v; break;
    case 8: *(uint64_t *)p = (uint64_t)v; break;
    }
}

static void put_str(void *base, int off, int size, const char *s) {
    if (off < 0 || !base || size <= 0) return;
    snprintf((char *)base + off, (size_t)size, "%s", s);
}

#define PUT(base, field, v) put(base, L_##field, v)
#define PUT_STR(base, field, s) put_str(base, L_##field, s)
#define NA16(v) ((v) == NA ? 0xFFFFULL : (unsigned long long)(v))

/* ------------------------------------------------------------------ library */

amdsmi_status_t amdsmi_init(uint64_t flags) {
    (void)flags;
    stall("amdsmi_init");
    have_st = 0;
    ndev = 0;
    const char *say = getenv("FAKE_AMDSMI_PRINT");
    if (say) printf("%s\n", say);
    const char *path = getenv("FAKE_AMDSMI_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) return ST_DRIVER_NOT_LOADED;
    load_config();
    amdsmi_status_t e = injected("amdsmi_init", -1);
    if (e) return e;
    t_init = now_s();
    initialized = 1;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_shut_down(void) {
    if (!initialized) return ST_NOT_INIT;
    initialized = 0;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_status_code_to_string(amdsmi_status_t status, const char **str) {
    static char buf[64];
    snprintf(buf, sizeof buf, "fake amdsmi status %d", status);
    if (str) *str = buf;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_socket_handles(uint32_t *count, void **handles) {
    if (!initialized) return ST_NOT_INIT;
    if (!count) return ST_INVAL;
    if (handles && *count >= 1) handles[0] = &socket_token;
    *count = 1;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_processor_handles(void *socket, uint32_t *count, void **handles) {
    if (!initialized) return ST_NOT_INIT;
    if (socket != &socket_token || !count) return ST_INVAL;
    load_config();
    amdsmi_status_t e = injected("amdsmi_get_processor_handles", -1);
    if (e) return e;
    if (handles) {
        uint32_t n = *count < (uint32_t)ndev ? *count : (uint32_t)ndev;
        for (uint32_t i = 0; i < n; i++) handles[i] = &devs[i];
    }
    *count = (uint32_t)ndev;
    return ST_SUCCESS;
}

/* ------------------------------------------------------------------ identity */

amdsmi_status_t amdsmi_get_gpu_device_uuid(void *h, unsigned *len, char *uuid) {
    ENTER(h);
    if (!len || !uuid) return ST_INVAL;
    snprintf(uuid, *len, "%s", d->uuid);
    *len = (unsigned)strlen(uuid);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_device_bdf(void *h, uint64_t *bdf) {
    ENTER(h);
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(d->bdf, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return ST_NOT_SUPPORTED;
    /* bit fields, low to high: function 3, device 5, bus 8, domain 48 */
    *bdf = (uint64_t)(fn & 7) | ((uint64_t)(dev & 31) << 3) | ((uint64_t)(bus & 255) << 8) | ((uint64_t)dom << 16);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_asic_info(void *h, void *info) {
    ENTER(h);
    memset(info, 0, L_asic_SIZE);
    PUT_STR(info, asic_market_name, d->name);
    PUT(info, asic_vendor_id, 0x1002);
    PUT_STR(info, asic_vendor_name, "Advanced Micro Devices Inc. [AMD/ATI]");
    PUT(info, asic_device_id, 0x74a1);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_kfd_info(void *h, void *info) {
    ENTER(h);
    if (d->partition_id == NA) return ST_NOT_SUPPORTED;
    memset(info, 0, L_kfd_SIZE);
    PUT(info, kfd_kfd_id, 1000 + d->index);
    PUT(info, kfd_node_id, d->index + 1);
    PUT(info, kfd_current_partition_id, d->partition_id);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_compute_partition(void *h, char *buf, uint32_t len) {
    ENTER(h);
    if (!d->partition[0]) return ST_NOT_SUPPORTED;
    snprintf(buf, len, "%s", d->partition);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_enumeration_info(void *h, void *info) {
    ENTER(h);
    if (!d->hip_uuid[0]) return ST_NOT_SUPPORTED;
    memset(info, 0, L_enum_SIZE);
    PUT(info, enum_drm_render, 128 + d->index);
    PUT(info, enum_drm_card, d->index);
    PUT(info, enum_hsa_id, d->index + 1);
    PUT(info, enum_hip_id, d->hip_id == NA ? d->index : d->hip_id);
    PUT_STR(info, enum_hip_uuid, d->hip_uuid);
    return ST_SUCCESS;
}

/* ------------------------------------------------------------------ readings */

amdsmi_status_t amdsmi_get_gpu_vram_usage(void *h, void *info) {
    ENTER(h);
    if (d->total == NA || d->used == NA) return ST_NOT_SUPPORTED;
    memset(info, 0, L_vram_SIZE);
    PUT(info, vram_vram_total, (unsigned long long)d->total >> 20); /* MB, as amdsmi reports */
    PUT(info, vram_vram_used, (unsigned long long)d->used >> 20);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_memory_total(void *h, int type, uint64_t *out) {
    ENTER(h);
    if (type != 0 || d->total == NA) return ST_NOT_SUPPORTED; /* 0: AMDSMI_MEM_TYPE_VRAM */
    *out = (uint64_t)d->total;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_memory_usage(void *h, int type, uint64_t *out) {
    ENTER(h);
    if (type != 0 || d->used == NA) return ST_NOT_SUPPORTED;
    *out = (uint64_t)d->used;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_activity(void *h, void *info) {
    ENTER(h);
    if (d->gfx == NA && d->umc == NA && d->mm == NA) return ST_NOT_SUPPORTED;
    memset(info, 0, L_act_SIZE);
    PUT(info, act_gfx_activity, NA16(d->gfx));
    PUT(info, act_umc_activity, NA16(d->umc));
    PUT(info, act_mm_activity, NA16(d->mm));
    return ST_SUCCESS;
}

static amdsmi_status_t power_info(dev_t_ *d, void *info) {
    memset(info, 0, L_pow_SIZE);
    PUT(info, pow_socket_power, NA16(d->power_w != NA ? d->power_w : d->avg_power_w));
    PUT(info, pow_current_socket_power, NA16(d->power_w));
    PUT(info, pow_average_socket_power, NA16(d->avg_power_w));
    PUT(info, pow_power_limit, NA16(d->limit_w));
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_power_info(void *h, void *info) {
    ENTER(h);
    return power_info(d, info);
}

/* amdsmi 6.3-6.4 call this one, with a sensor index */
amdsmi_status_t amdsmi_get_power_info_v2(void *h, uint32_t sensor, void *info) {
    ENTER(h);
    return sensor == 0 ? power_info(d, info) : ST_NOT_SUPPORTED;
}

amdsmi_status_t amdsmi_get_temp_metric(void *h, int sensor, int metric, int64_t *out) {
    ENTER(h);
    long long v = sensor == 0 ? d->temp_edge : sensor == 1 ? d->temp_hotspot : NA; /* EDGE, HOTSPOT */
    if (metric != 0 || v == NA) return ST_NOT_SUPPORTED;                        /* 0: CURRENT */
    *out = v;
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_energy_count(void *h, uint64_t *acc, float *resolution, uint64_t *timestamp) {
    ENTER(h);
    if (d->energy == NA) return ST_NOT_SUPPORTED;
    double dt = now_s() - t_init;
    double grown_uj = (d->power_w == NA ? 0 : (double)d->power_w) * dt * 1e6;
    *acc = (uint64_t)d->energy + (uint64_t)(grown_uj / ENERGY_RESOLUTION_UJ);
    *resolution = ENERGY_RESOLUTION_UJ;
    if (timestamp) *timestamp = (uint64_t)(dt * 1e9);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_clock_info(void *h, int type, void *info) {
    ENTER(h);
    long long v = type == 0 ? d->gfx_clock : type == 4 ? d->mem_clock : NA; /* AMDSMI_CLK_TYPE_GFX/MEM */
    if (v == NA) return ST_NOT_SUPPORTED;
    memset(info, 0, L_clk_SIZE);
    PUT(info, clk_clk, v);
    PUT(info, clk_min_clk, 500);
    PUT(info, clk_max_clk, v > 500 ? v : 500);
    return ST_SUCCESS;
}

amdsmi_status_t amdsmi_get_gpu_process_list(void *h, uint32_t *max_processes, void *list) {
    ENTER(h);
    if (!max_processes) return ST_INVAL;
    uint32_t n = 0, cap = *max_processes;
    for (int i = 0; i < nproc; i++) {
        if (procs[i].dev != d->index) continue;
        if (list && n < cap) {
            char *p = (char *)list + (size_t)n * L_proc_SIZE;
            memset(p, 0, L_proc_SIZE);
            PUT_STR(p, proc_name, procs[i].name[0] ? procs[i].name : "python3");
            PUT(p, proc_pid, (unsigned long long)procs[i].pid);
            PUT(p, proc_mem, (unsigned long long)(procs[i].vram + procs[i].gtt));
            PUT(p, proc_engine_usage_gfx, (unsigned long long)procs[i].gfx_ns);
            PUT(p, proc_memory_usage_gtt_mem, (unsigned long long)procs[i].gtt);
            PUT(p, proc_memory_usage_vram_mem, (unsigned long long)procs[i].vram);
            PUT(p, proc_cu_occupancy, 0xFFFFFFFFULL);
        }
        n++;
    }
    if (list && n > 0) log_line("procs %d %u\n", d->index, n);
    *max_processes = n < cap || !list ? n : cap;
    return list && n > cap ? ST_OUT_OF_RESOURCES : ST_SUCCESS;
}
