/*
 * A fake libnvidia-ml.so.1 for tests: the real nvidia-ml-py (pynvml) loads it with
 * CDLL("libnvidia-ml.so.1") and goes through its real ctypes path — structs, versioned symbols,
 * error codes — with no GPU and no driver.
 *
 * Build:  gcc -shared -fPIC -O2 -Wl,-soname,libnvidia-ml.so.1 -o DIR/libnvidia-ml.so.1 fakenvml.c
 * Use:    LD_LIBRARY_PATH=DIR FAKE_NVML_CONFIG=/path/to/config.txt python ...
 *
 * Config: a text file, one record per line, fields separated by TABs (so names may hold spaces);
 * the first field is the record kind, the others are key=value. The file is re-read whenever its
 * inode, size or mtime changes (tests write it atomically: write a temp file, rename it over), so a
 * test can add the PIDs of its children, or lose a GPU, while a tracker is running.
 *
 *   device  name=...  uuid=GPU-...  bus=00000000:3B:00.0  total=BYTES  used=BYTES  reserved=BYTES
 *           util=PCT  memutil=PCT  temp=C  power_mw=MW  limit_mw=MW  sm_clock=MHZ  mem_clock=MHZ
 *           fan=PCT  energy_mj=MJ  gpm=0|1  sm_act=PCT  sm_occ=PCT  tensor=PCT  dram_bw=PCT
 *           lost=0|1  lost_after=N  mig=0|1  acct=0|1  minor=N
 *   mig     parent=DEVICE_INDEX  uuid=MIG-...  total=BYTES  used=BYTES  gi=ID  ci=ID
 *   process dev=DEVICE_INDEX  [mig=K]  pid=PID  mem=BYTES|NA  [graphics=1|2]   (K: the K-th mig line, from 0)
 *           graphics=1: in the graphics list only; graphics=2: a process with a compute and a graphics context
 *           (nvidia-smi's type C+G), in both lists, each time with its whole figure, as nvidia-smi shows it once
 *   procutil dev=DEVICE_INDEX  pid=PID  sm=PCT  mem=PCT
 *   error   fn=SYMBOL  dev=DEVICE_INDEX|-1  code=NVML_RETURN
 *   cost    fn=SYMBOL  us=MICROSECONDS
 *   acct    dev=DEVICE_INDEX  pid=PID  maxmem=BYTES|NA  running=0|1  [start_us=EPOCH_US]
 *
 * Devices are numbered in file order (0, 1, ...), MIG devices in file order per parent. A numeric
 * field given as NA (or left out) answers NVML_ERROR_NOT_SUPPORTED. energy_mj is the counter at
 * nvmlInit; it then grows by power_mw x seconds since nvmlInit, as a real GPU's would. lost=1 makes
 * every query of that device answer NVML_ERROR_GPU_IS_LOST; lost_after=N does so after N queries.
 * With no FAKE_NVML_CONFIG (or an unreadable one) nvmlInit answers NVML_ERROR_DRIVER_NOT_LOADED.
 *
 * A process may take its memory from a file instead: `memfile=PATH` (in place of mem=) holds the
 * bytes as a decimal number, read at every call, so the tracked program itself can grow and shrink
 * its "GPU memory" while it runs (write a temp file, rename it over); no file, or an empty one: the
 * process is not listed (no CUDA context yet). "PID BYTES" in the file names the process too (then
 * pid= may be left out). Its device's memory used counts it on top of used=.
 *
 * `cost` makes every call of SYMBOL burn that much CPU time of the calling thread (a busy loop on
 * CLOCK_THREAD_CPUTIME_ID), so a test sees what a real driver's slow calls cost the tracker.
 * Calls may come from several threads (NVML is thread-safe): each one holds a library lock.
 * FAKE_NVML_LOG=PATH: nvmlShutdown writes there, per function called since nvmlInit,
 * `SYMBOL<TAB>COUNT<TAB>T1,T2,...` (the wall-clock times of its first 2048 calls), so a test can check how
 * often each was called.
 *
 * Accounting (what `nvidia-smi -am 1` turns on): acct=1 on a device makes nvmlDeviceGetAccountingMode
 * answer enabled, acct=0 disabled, NA/absent NOT_SUPPORTED (as on MIG devices, always). `acct` lines are
 * the driver's records, kept after a process exits: nvmlDeviceGetAccountingPids lists their PIDs and
 * nvmlDeviceGetAccountingStats gives maxMemoryUsage, isRunning and startTime (default: when the config was
 * written, so a record belongs to a process started before it; give an older start_us to stand for an
 * earlier process that had the same PID). The records are only readable while the mode is on.
 * minor=N is nvmlDeviceGetMinorNumber: the N of the device node /dev/nvidiaN (NA: NOT_SUPPORTED).
 * Processes' PIDs are taken as given: a test in a PID namespace writes the host PIDs NVML would report.
 *
 * A driver that hangs: FAKE_NVML_SLEEP="SYMBOL=SECONDS[,SYMBOL=SECONDS...]" makes every call of SYMBOL sleep that
 * long (wall clock, holding the library lock, so every other call waits too, as behind a driver's lock), or never
 * return with SECONDS = hang (a GPU fallen off the bus). nvmlInitWithFlags may be named too. The config may say
 * the same from a moment on, or after the first N calls of SYMBOL (a driver that answered, then hung):
 *   stall   fn=SYMBOL  secs=SECONDS|hang  [after=N]
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

#define NA (-1LL)
#define MAXDEV 16
#define MAXMIG 64
#define MAXPROC 256
#define MAXERR 32
#define MAXCOST 64
#define MAXFN 128
#define MAXTIMES 2048
#define ABSENT (-2LL)
#define MAXACCT 256

typedef int nvmlReturn_t;

typedef struct {
    int is_mig;
    int index;   /* device index, or MIG index within its parent */
    int parent;  /* MIG: parent device index */
    char name[96];
    char uuid[96];
    char bus[32];
    long long total, used, reserved, util, memutil, temp, power_mw, limit_mw, sm_clock, mem_clock, fan,
        energy_mj, gpm, sm_act, sm_occ, tensor, dram_bw, lost, lost_after, mig, gi, ci, acct, minor;
    long long calls;
} dev_t_;

typedef struct {
    int dev, mig, pid, graphics;
    long long mem;
    char memfile[256];
} proc_t_;

typedef struct {
    int dev, pid;
    unsigned sm, mem;
} putil_t_;

typedef struct {
    int dev, pid, running;
    long long maxmem, start_us;
} acct_t_;

typedef struct {
    char fn[64];
    int dev;
    int code;
} err_t_;

static dev_t_ devs[MAXDEV];
static dev_t_ migs[MAXMIG];
static proc_t_ procs[MAXPROC];
static putil_t_ putils[MAXPROC];
static err_t_ errs[MAXERR];
static struct {
    char fn[64];
    long long us;
} costs[MAXCOST];
static acct_t_ accts[MAXACCT];
static struct {
    char fn[64];
    char secs[32];
    long long after;
} stalls[MAXCOST];
static int ndev, nmig, nproc, nputil, nerr, ncost, nacct, nstall;

/* one lock for every call: the tracker reads from two threads at once, as NVML allows */
static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static void unlock_lib(int *held) {
    if (*held) pthread_mutex_unlock(&lib_lock);
}
#define LOCKED int held_ __attribute__((cleanup(unlock_lib))) = (pthread_mutex_lock(&lib_lock), 1)

static struct {
    const char *fn;
    long long n;
    double t[MAXTIMES];
} call_log[MAXFN];
static int ncall_log;
static int initialized;
static double t_init;
static unsigned long long config_stamp_us; /* when the config was last loaded: procutil timestamp */
static struct stat last_st;
static int have_st;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long long now_us_wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
}

static void burn_us(long long us) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    double end = ts.tv_sec + ts.tv_nsec / 1e9 + us / 1e6;
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
}

/* Sleep SECONDS (a decimal number), or forever for "hang". */
static void sleep_for(const char *v) {
    if (!strncmp(v, "hang", 4))
        for (;;) sleep(3600);
    double secs = atof(v);
    struct timespec ts = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* FAKE_NVML_SLEEP and `stall` records: sleep (or hang) in `fn` (its `call`-th call), with the library lock held. */
static void stall(const char *fn, long long call) {
    const char *spec = getenv("FAKE_NVML_SLEEP");
    size_t n = strlen(fn);
    for (const char *p = spec; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, fn, n) && p[n] == '=') {
            sleep_for(p + n + 1);
            return;
        }
    for (int i = 0; i < nstall; i++)
        if (!strcmp(stalls[i].fn, fn) && call > stalls[i].after) {
            sleep_for(stalls[i].secs);
            return;
        }
}

/* Count the call, note its time, and burn its configured CPU cost. */
static void called(const char *fn) {
    int i = 0;
    while (i < ncall_log && call_log[i].fn != fn && strcmp(call_log[i].fn, fn)) i++;
    if (i == ncall_log && ncall_log < MAXFN) {
        call_log[ncall_log].fn = fn;
        call_log[ncall_log++].n = 0;
    }
    if (i < MAXFN) {
        if (call_log[i].n < MAXTIMES) call_log[i].t[call_log[i].n] = now_us_wall() / 1e6;
        call_log[i].n++;
        stall(fn, call_log[i].n);
    }
    for (int k = 0; k < ncost; k++)
        if (!strcmp(costs[k].fn, fn)) {
            burn_us(costs[k].us);
            break;
        }
}

static void write_call_log(void) {
    const char *path = getenv("FAKE_NVML_LOG");
    FILE *fp = path ? fopen(path, "w") : NULL;
    if (!fp) return;
    for (int i = 0; i < ncall_log; i++) {
        fprintf(fp, "%s\t%lld\t", call_log[i].fn, call_log[i].n);
        long long n = call_log[i].n < MAXTIMES ? call_log[i].n : MAXTIMES;
        for (long long k = 0; k < n; k++) fprintf(fp, k ? ",%.6f" : "%.6f", call_log[i].t[k]);
        fputc('\n', fp);
    }
    fclose(fp);
}

static long long num(const char *v) {
    if (strcmp(v, "NA") == 0) return NA;
    return strtoll(v, NULL, 10);
}

static void dev_defaults(dev_t_ *d) {
    memset(d, 0, sizeof *d);
    long long *f[] = {&d->total, &d->used, &d->reserved, &d->util, &d->memutil, &d->temp,
                      &d->power_mw, &d->limit_mw, &d->sm_clock, &d->mem_clock, &d->fan,
                      &d->energy_mj, &d->sm_act, &d->sm_occ, &d->tensor, &d->dram_bw,
                      &d->lost_after, &d->gi, &d->ci, &d->acct, &d->minor};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) *f[i] = NA;
}

static void set_dev_field(dev_t_ *d, const char *k, const char *v) {
    if (!strcmp(k, "name")) snprintf(d->name, sizeof d->name, "%s", v);
    else if (!strcmp(k, "uuid")) snprintf(d->uuid, sizeof d->uuid, "%s", v);
    else if (!strcmp(k, "bus")) snprintf(d->bus, sizeof d->bus, "%s", v);
    else if (!strcmp(k, "parent")) d->parent = (int)num(v);
#define F(n) else if (!strcmp(k, #n)) d->n = num(v);
    F(total) F(used) F(reserved) F(util) F(memutil) F(temp) F(power_mw) F(limit_mw) F(sm_clock)
    F(mem_clock) F(fan) F(energy_mj) F(gpm) F(sm_act) F(sm_occ) F(tensor) F(dram_bw) F(lost)
    F(lost_after) F(mig) F(gi) F(ci) F(acct) F(minor)
#undef F
}

static void load_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (have_st && st.st_ino == last_st.st_ino && st.st_size == last_st.st_size &&
        st.st_mtim.tv_sec == last_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == last_st.st_mtim.tv_nsec)
        return;
    FILE *fp = fopen(path, "r");
    if (!fp) return;
    /* keep per-device call counters across reloads: lost_after counts from nvmlInit */
    long long calls[MAXDEV];
    for (int i = 0; i < MAXDEV; i++) calls[i] = i < ndev ? devs[i].calls : 0;
    last_st = st;
    have_st = 1;
    ndev = nmig = nproc = nputil = nerr = ncost = nacct = nstall = 0;
    unsigned long long loaded_us = now_us_wall();
    int mig_count[MAXDEV] = {0};
    char line[4096];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = 0;
        char *save = NULL;
        char *kind = strtok_r(line, "\t", &save);
        if (!kind || kind[0] == '#') continue;
        dev_t_ *d = NULL;
        proc_t_ *p = NULL;
        putil_t_ *u = NULL;
        err_t_ *e = NULL;
        int c = -1, w = -1;
        acct_t_ *a = NULL;
        if (!strcmp(kind, "device") && ndev < MAXDEV) {
            d = &devs[ndev];
            dev_defaults(d);
            d->index = ndev;
            d->calls = calls[ndev];
            ndev++;
        } else if (!strcmp(kind, "mig") && nmig < MAXMIG) {
            d = &migs[nmig++];
            dev_defaults(d);
            d->is_mig = 1;
        } else if (!strcmp(kind, "process") && nproc < MAXPROC) {
            p = &procs[nproc++];
            memset(p, 0, sizeof *p);
            p->mig = -1;
        } else if (!strcmp(kind, "procutil") && nputil < MAXPROC) {
            u = &putils[nputil++];
            memset(u, 0, sizeof *u);
        } else if (!strcmp(kind, "acct") && nacct < MAXACCT) {
            a = &accts[nacct++];
            memset(a, 0, sizeof *a);
            a->maxmem = NA;
            a->start_us = (long long)loaded_us;
        } else if (!strcmp(kind, "error") && nerr < MAXERR) {
            e = &errs[nerr++];
            memset(e, 0, sizeof *e);
            e->dev = -1;
        } else if (!strcmp(kind, "cost") && ncost < MAXCOST) {
            c = ncost++;
            costs[c].fn[0] = 0;
            costs[c].us = 0;
        } else if (!strcmp(kind, "stall") && nstall < MAXCOST) {
            w = nstall++;
            stalls[w].fn[0] = stalls[w].secs[0] = 0;
            stalls[w].after = 0;
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
            else if (p) {
                if (!strcmp(k, "dev")) p->dev = atoi(v);
                else if (!strcmp(k, "mig")) p->mig = atoi(v);
                else if (!strcmp(k, "pid")) p->pid = atoi(v);
                else if (!strcmp(k, "mem")) p->mem = num(v);
                else if (!strcmp(k, "graphics")) p->graphics = atoi(v);
                else if (!strcmp(k, "memfile")) snprintf(p->memfile, sizeof p->memfile, "%s", v);
            } else if (u) {
                if (!strcmp(k, "dev")) u->dev = atoi(v);
                else if (!strcmp(k, "pid")) u->pid = atoi(v);
                else if (!strcmp(k, "sm")) u->sm = (unsigned)atoi(v);
                else if (!strcmp(k, "mem")) u->mem = (unsigned)atoi(v);
            } else if (a) {
                if (!strcmp(k, "dev")) a->dev = atoi(v);
                else if (!strcmp(k, "pid")) a->pid = atoi(v);
                else if (!strcmp(k, "maxmem")) a->maxmem = num(v);
                else if (!strcmp(k, "running")) a->running = atoi(v);
                else if (!strcmp(k, "start_us")) a->start_us = num(v);
            } else if (e) {
                if (!strcmp(k, "fn")) snprintf(e->fn, sizeof e->fn, "%s", v);
                else if (!strcmp(k, "dev")) e->dev = atoi(v);
                else if (!strcmp(k, "code")) e->code = atoi(v);
            } else if (w >= 0) {
                if (!strcmp(k, "fn")) snprintf(stalls[w].fn, sizeof stalls[w].fn, "%s", v);
                else if (!strcmp(k, "secs")) snprintf(stalls[w].secs, sizeof stalls[w].secs, "%s", v);
                else if (!strcmp(k, "after")) stalls[w].after = strtoll(v, NULL, 10);
            } else if (c >= 0) {
                if (!strcmp(k, "fn")) snprintf(costs[c].fn, sizeof costs[c].fn, "%s", v);
                else if (!strcmp(k, "us")) costs[c].us = strtoll(v, NULL, 10);
            }
        }
        if (d && d->is_mig && d->parent >= 0 && d->parent < MAXDEV) d->index = mig_count[d->parent]++;
    }
    fclose(fp);
    config_stamp_us = loaded_us;
}

/* A process's memory now (and its pid): its memfile's figures (ABSENT: no file, not listed), else mem=. */
static long long proc_mem(const proc_t_ *p, int *pid) {
    *pid = p->pid;
    if (!p->memfile[0]) return p->mem;
    int fd = open(p->memfile, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ABSENT;
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return ABSENT;
    buf[n] = 0;
    char *rest;
    long long first = strtoll(buf, &rest, 10);
    if (rest == buf) return ABSENT;
    while (*rest == ' ' || *rest == '\t') rest++;
    if (*rest >= '0' && *rest <= '9') { /* "PID BYTES" */
        *pid = (int)first;
        return strtoll(rest, NULL, 10);
    }
    return first;
}

/* used= plus what the device's memfile processes hold now */
static long long used_now(const dev_t_ *d) {
    long long used = d->used;
    int root = d->is_mig ? d->parent : d->index;
    for (int i = 0; i < nproc; i++) {
        const proc_t_ *p = &procs[i];
        if (!p->memfile[0] || p->dev != root || (d->is_mig && !(p->mig >= 0 && &migs[p->mig] == d))) continue;
        int pid;
        long long m = proc_mem(p, &pid);
        if (m > 0) used += m;
    }
    return used;
}

static nvmlReturn_t injected(const char *fn, int dev) {
    for (int i = 0; i < nerr; i++)
        if (!strcmp(errs[i].fn, fn) && (errs[i].dev < 0 || errs[i].dev == dev)) return errs[i].code;
    return NVML_SUCCESS;
}

/* Resolve a handle, count the call, apply lost/injected errors. */
static nvmlReturn_t enter(const char *fn, void *handle, dev_t_ **out) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    load_config();
    called(fn);
    dev_t_ *d = (dev_t_ *)handle;
    int ok = (d >= devs && d < devs + ndev) || (d >= migs && d < migs + nmig);
    if (!ok) return NVML_ERROR_INVALID_ARGUMENT;
    int root = d->is_mig ? d->parent : d->index;
    dev_t_ *r = &devs[root];
    r->calls++;
    if (r->lost == 1 || (r->lost_after >= 0 && r->calls > r->lost_after)) return NVML_ERROR_GPU_IS_LOST;
    nvmlReturn_t e = injected(fn, root);
    if (e) return e;
    *out = d;
    return NVML_SUCCESS;
}

#define ENTER(h)                               \
    LOCKED;                                    \
    dev_t_ *d = NULL;                          \
    nvmlReturn_t rc_ = enter(__func__, h, &d); \
    if (rc_) return rc_;

static nvmlReturn_t put_uint(unsigned *out, long long v) {
    if (v == NA) return NVML_ERROR_NOT_SUPPORTED;
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = (unsigned)v;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ init */

nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    LOCKED;
    stall("nvmlInitWithFlags", 1);
    have_st = 0;
    ndev = 0;
    const char *path = getenv("FAKE_NVML_CONFIG");
    struct stat st;
    if (!path || stat(path, &st) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    load_config();
    nvmlReturn_t e = injected("nvmlInitWithFlags", -1);
    if (e) return e;
    for (int i = 0; i < ndev; i++) devs[i].calls = 0;
    ncall_log = 0; /* the log is of this session's calls (a test process may init the library again) */
    t_init = now_s();
    initialized = 1;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    LOCKED;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    write_call_log();
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *buf, unsigned len) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    snprintf(buf, len, "999.99-fake");
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ devices */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    LOCKED;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    load_config();
    nvmlReturn_t e = injected("nvmlDeviceGetCount_v2", -1);
    if (e) return e;
    *count = (unsigned)ndev;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, void **handle) {
    LOCKED;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    load_config();
    if (index >= (unsigned)ndev) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t e = injected("nvmlDeviceGetHandleByIndex_v2", (int)index);
    if (e) return e;
    *handle = &devs[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(void *h, unsigned *index) {
    ENTER(h);
    *index = (unsigned)(d->is_mig ? d->parent : d->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(void *h, char *buf, unsigned len) {
    ENTER(h);
    if (d->is_mig) snprintf(buf, len, "%s MIG", devs[d->parent].name);
    else snprintf(buf, len, "%s", d->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(void *h, char *buf, unsigned len) {
    ENTER(h);
    snprintf(buf, len, "%s", d->uuid);
    return NVML_SUCCESS;
}

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

nvmlReturn_t nvmlDeviceGetPciInfo_v3(void *h, nvmlPciInfo_t *pci) {
    ENTER(h);
    dev_t_ *r = d->is_mig ? &devs[d->parent] : d;
    if (!r->bus[0]) return NVML_ERROR_NOT_SUPPORTED;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%s", r->bus);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", r->bus);
    pci->pciDeviceId = 0x233010de;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
    ENTER(h);
    if (d->total == NA || d->used == NA) return NVML_ERROR_NOT_SUPPORTED;
    m->total = (unsigned long long)d->total;
    m->used = (unsigned long long)used_now(d);
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(void *h, nvmlMemory_v2_t *m) {
    ENTER(h);
    if (d->total == NA || d->used == NA) return NVML_ERROR_NOT_SUPPORTED;
    if (m->version != 0x02000028) return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    long long reserved = d->reserved == NA ? 0 : d->reserved;
    m->total = (unsigned long long)d->total;
    m->reserved = (unsigned long long)reserved;
    m->used = (unsigned long long)used_now(d);
    m->free = m->total - m->used - m->reserved;
    return NVML_SUCCESS;
}

typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
    ENTER(h);
    if (d->is_mig || d->util == NA) return NVML_ERROR_NOT_SUPPORTED;
    u->gpu = (unsigned)d->util;
    u->memory = d->memutil == NA ? 0 : (unsigned)d->memutil;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(void *h, int sensor, unsigned *t) {
    (void)sensor;
    ENTER(h);
    return put_uint(t, d->temp);
}
nvmlReturn_t nvmlDeviceGetPowerUsage(void *h, unsigned *p) {
    ENTER(h);
    return put_uint(p, d->power_mw);
}
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(void *h, unsigned *p) {
    ENTER(h);
    return put_uint(p, d->limit_mw);
}
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(void *h, unsigned *p) {
    ENTER(h);
    return put_uint(p, d->limit_mw);
}
nvmlReturn_t nvmlDeviceGetFanSpeed(void *h, unsigned *p) {
    ENTER(h);
    return put_uint(p, d->fan);
}
nvmlReturn_t nvmlDeviceGetClockInfo(void *h, int type, unsigned *mhz) {
    ENTER(h);
    if (type == 1) return put_uint(mhz, d->sm_clock);
    if (type == 2) return put_uint(mhz, d->mem_clock);
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(void *h, unsigned long long *mj) {
    ENTER(h);
    if (d->energy_mj == NA) return NVML_ERROR_NOT_SUPPORTED;
    double watts = d->power_mw == NA ? 0.0 : d->power_mw / 1000.0;
    *mj = (unsigned long long)d->energy_mj + (unsigned long long)(watts * (now_s() - t_init) * 1000.0);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ processes */

typedef struct {
    unsigned pid;
    unsigned long long usedGpuMemory;
    unsigned gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static nvmlReturn_t running(dev_t_ *d, int graphics, unsigned *count, nvmlProcessInfo_t *out) {
    unsigned n = 0;
    int root = d->is_mig ? d->parent : d->index;
    for (int i = 0; i < nproc; i++) {
        proc_t_ *p = &procs[i];
        if ((p->graphics != graphics && p->graphics != 2) || p->dev != root) continue;
        /* a MIG device lists its own processes; the parent lists them all, with no memory figure */
        int mine = d->is_mig ? (p->mig >= 0 && &migs[0] + p->mig == d) : 1;
        if (!mine) continue;
        int pid;
        long long mem = proc_mem(p, &pid);
        if (mem == ABSENT) continue;
        if (out && n < *count) {
            out[n].pid = (unsigned)pid;
            int whole_mig_parent = !d->is_mig && p->mig >= 0;
            out[n].usedGpuMemory = (mem == NA || whole_mig_parent) ? ~0ULL : (unsigned long long)mem;
            dev_t_ *m = p->mig >= 0 && p->mig < nmig ? &migs[p->mig] : NULL;
            out[n].gpuInstanceId = m && m->gi != NA ? (unsigned)m->gi : 0xFFFFFFFFu;
            out[n].computeInstanceId = m && m->ci != NA ? (unsigned)m->ci : 0xFFFFFFFFu;
        }
        n++;
    }
    if (!out) {
        *count = n;
        return n ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    }
    if (n > *count) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void *h, unsigned *count, nvmlProcessInfo_t *out) {
    ENTER(h);
    return running(d, 0, count, out);
}
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(void *h, unsigned *count, nvmlProcessInfo_t *out) {
    ENTER(h);
    return running(d, 1, count, out);
}

typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* Samples carry the time the config was loaded: asking again with that timestamp as lastSeen gives
 * NOT_FOUND until the test writes new figures — as a real GPU gives nothing new between samples. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(void *h, nvmlProcessUtilizationSample_t *out, unsigned *count,
                                             unsigned long long lastSeen) {
    ENTER(h);
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    unsigned n = 0;
    if (config_stamp_us > lastSeen)
        for (int i = 0; i < nputil; i++)
            if (putils[i].dev == d->index) {
                if (out && n < *count) {
                    out[n].pid = (unsigned)putils[i].pid;
                    out[n].timeStamp = config_stamp_us;
                    out[n].smUtil = putils[i].sm;
                    out[n].memUtil = putils[i].mem;
                    out[n].encUtil = out[n].decUtil = 0;
                }
                n++;
            }
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    if (!out || n > *count) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ MIG */

nvmlReturn_t nvmlDeviceGetMigMode(void *h, unsigned *current, unsigned *pending) {
    ENTER(h);
    if (d->is_mig || d->mig == NA) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (unsigned)d->mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(void *h, unsigned *count) {
    ENTER(h);
    if (d->is_mig || d->mig != 1) return NVML_ERROR_NOT_SUPPORTED;
    *count = 7;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(void *h, unsigned index, void **mig) {
    ENTER(h);
    if (d->is_mig || d->mig != 1) return NVML_ERROR_NOT_SUPPORTED;
    for (int i = 0; i < nmig; i++)
        if (migs[i].parent == d->index && migs[i].index == (int)index) {
            *mig = &migs[i];
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(void *h, unsigned *is_mig) {
    ENTER(h);
    *is_mig = (unsigned)d->is_mig;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetGpuInstanceId(void *h, unsigned *id) {
    ENTER(h);
    if (!d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return put_uint(id, d->gi);
}
nvmlReturn_t nvmlDeviceGetComputeInstanceId(void *h, unsigned *id) {
    ENTER(h);
    if (!d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return put_uint(id, d->ci);
}
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(void *h, void **parent) {
    ENTER(h);
    if (!d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &devs[d->parent];
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ GPM */

typedef struct {
    unsigned version, isSupportedDevice;
} nvmlGpmSupport_t;

typedef struct {
    void *dev;
    double t;
} gpm_sample_t;

typedef struct {
    char *shortName, *longName, *unit;
} metric_info_t;
typedef struct {
    unsigned metricId;
    int nvmlReturn;
    double value;
    metric_info_t info;
} nvmlGpmMetric_t;
typedef struct {
    unsigned version, numMetrics;
    gpm_sample_t *sample1, *sample2;
    nvmlGpmMetric_t metrics[477];
} nvmlGpmMetricsGet_t;

nvmlReturn_t nvmlGpmQueryDeviceSupport(void *h, nvmlGpmSupport_t *s) {
    ENTER(h);
    s->isSupportedDevice = d->gpm == 1 ? 1u : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(gpm_sample_t **s) {
    LOCKED;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    called(__func__);
    *s = calloc(1, sizeof **s);
    return *s ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}
nvmlReturn_t nvmlGpmSampleFree(gpm_sample_t *s) {
    LOCKED;
    called(__func__);
    free(s);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlGpmSampleGet(void *h, gpm_sample_t *s) {
    ENTER(h);
    if (d->gpm != 1) return NVML_ERROR_NOT_SUPPORTED;
    s->dev = d;
    s->t = now_s();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    LOCKED;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    called(__func__);
    if (m->version != 1) return 25;
    if (!m->sample1 || !m->sample2 || !m->sample1->dev || m->sample1->dev != m->sample2->dev)
        return NVML_ERROR_INVALID_ARGUMENT;
    dev_t_ *d = (dev_t_ *)m->sample1->dev;
    for (unsigned i = 0; i < m->numMetrics && i < 477; i++) {
        long long v = NA;
        switch (m->metrics[i].metricId) {
        case 2: v = d->sm_act; break;   /* NVML_GPM_METRIC_SM_UTIL */
        case 3: v = d->sm_occ; break;   /* NVML_GPM_METRIC_SM_OCCUPANCY */
        case 5: v = d->tensor; break;   /* NVML_GPM_METRIC_ANY_TENSOR_UTIL */
        case 10: v = d->dram_bw; break; /* NVML_GPM_METRIC_DRAM_BW_UTIL */
        }
        m->metrics[i].nvmlReturn = v == NA ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
        m->metrics[i].value = v == NA ? 0.0 : (double)v;
        m->metrics[i].info.shortName = m->metrics[i].info.longName = m->metrics[i].info.unit = NULL;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ accounting */

typedef struct {
    unsigned gpuUtilization, memoryUtilization;
    unsigned long long maxMemoryUsage, time, startTime;
    unsigned isRunning;
    unsigned reserved[5];
} nvmlAccountingStats_t;

nvmlReturn_t nvmlDeviceGetMinorNumber(void *h, unsigned *minor) {
    ENTER(h);
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    return put_uint(minor, d->minor);
}

nvmlReturn_t nvmlDeviceGetAccountingMode(void *h, int *mode) {
    ENTER(h);
    if (d->is_mig || d->acct == NA) return NVML_ERROR_NOT_SUPPORTED;
    *mode = d->acct ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingBufferSize(void *h, unsigned *size) {
    ENTER(h);
    if (d->is_mig || d->acct == NA) return NVML_ERROR_NOT_SUPPORTED;
    *size = MAXACCT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingPids(void *h, unsigned *count, unsigned *pids) {
    ENTER(h);
    if (d->is_mig || d->acct == NA) return NVML_ERROR_NOT_SUPPORTED;
    unsigned n = 0;
    if (d->acct == 1)
        for (int i = 0; i < nacct; i++)
            if (accts[i].dev == d->index) {
                if (pids && n < *count) pids[n] = (unsigned)accts[i].pid;
                n++;
            }
    if (n > *count) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAccountingStats(void *h, unsigned pid, nvmlAccountingStats_t *st) {
    ENTER(h);
    if (d->is_mig || d->acct == NA) return NVML_ERROR_NOT_SUPPORTED;
    if (d->acct != 1) return NVML_ERROR_NOT_FOUND;
    for (int i = nacct - 1; i >= 0; i--) /* the newest record of a PID, as the driver's buffer gives */
        if (accts[i].dev == d->index && accts[i].pid == (int)pid) {
            memset(st, 0, sizeof *st);
            st->maxMemoryUsage = accts[i].maxmem == NA ? ~0ULL : (unsigned long long)accts[i].maxmem;
            st->startTime = (unsigned long long)accts[i].start_us;
            st->isRunning = (unsigned)accts[i].running;
            st->time = accts[i].running ? 0 : 1000;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}
