/* A model-file loader for read-test --pid's tests: reads FILE in passes
 * until its stdin closes, the way real engines do, and measures its own
 * progress (CLOCK_REALTIME ns, bytes consumed) every 2 ms into LOG.
 *
 *   loader MODE FILE THREADS CACHE LOG
 *   MODE   mmap      one thread sums every byte of a MAP_SHARED mapping
 *          fread     fread() 1 MiB into a buffer, then memcpy to a destination
 *          direct    O_DIRECT pread() of 4 MiB chunks, THREADS threads
 *          buffered  buffered pread() of 1 MiB chunks, THREADS threads
 *   CACHE  cold      POSIX_FADV_DONTNEED of FILE before every pass
 *          warm      FILE read once before "ready", never dropped
 * Prints "ready" when the readers run; on EOF of stdin it stops them and
 * writes LOG ("ns bytes" lines).
 *
 * Stand-in mode (read-test --pid's loader recognition): with LOADER_MODE
 * set, MODE FILE THREADS CACHE LOG come from LOADER_MODE, LOADER_FILE,
 * LOADER_THREADS, LOADER_CACHE and LOADER_LOG, and argv is free to carry a
 * real loader's command line (docs/loaders.md gives their sources). Also:
 *   LOADER_LIB=PATH    dlopen PATH (a library named like the real one's)
 *   LOADER_TITLE=T     fork: the parent keeps argv (a server's command
 *                      line) and waits; the child renames itself T the way
 *                      setproctitle does (comm, and argv overwritten in
 *                      place), reads, and prints "ready PID"
 *   LOADER_PROGRESS=1  print a progress line with its own rate (GB/s) to
 *                      stderr every 100 ms, as loaders' progress bars do */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 2000000
static const char *mode, *path;
static int nthreads, cold;
static off_t size;
static atomic_ullong consumed, next_off;
static atomic_int stop;
static pthread_barrier_t pass_barrier;
static uint64_t *samples;
static size_t nsamples;
static volatile uint64_t sink;
static int progress;
static uint64_t started_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static void die(const char *what) { perror(what); exit(1); }

static void drop(int fd) {
    if (cold && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) die("fadvise");
}

static void *sampler(void *arg) {
    (void)arg;
    unsigned n = 0;
    while (!atomic_load(&stop) && nsamples + 2 <= MAX_SAMPLES * 2) {
        uint64_t t = now_ns(), c = atomic_load(&consumed);
        samples[nsamples++] = t;
        samples[nsamples++] = c;
        if (progress && ++n % 50 == 0 && t > started_ns)
            fprintf(stderr, "\rLoading safetensors checkpoint shards: %llu MB [%.2fGB/s]",
                    (unsigned long long)(c / 1000000), (double)c / (double)(t - started_ns));
        usleep(2000);
    }
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    char c;
    while (read(0, &c, 1) > 0) {}
    atomic_store(&stop, 1);
    return NULL;
}

/* Threads share one offset counter; at the end of a pass they meet at a
 * barrier, one of them drops the cache and resets the counter. */
static void *pread_worker(void *arg) {
    int fd = (int)(intptr_t)arg;
    size_t chunk = strcmp(mode, "direct") == 0 ? (4 << 20) : (1 << 20);
    void *buf;
    if (posix_memalign(&buf, 4096, chunk)) die("posix_memalign");
    for (;;) {
        uint64_t off = atomic_fetch_add(&next_off, chunk);
        if (off >= (uint64_t)size || atomic_load(&stop)) {
            if (pthread_barrier_wait(&pass_barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
                drop(fd);
                atomic_store(&next_off, 0);
            }
            pthread_barrier_wait(&pass_barrier);
            if (atomic_load(&stop)) break;
            continue;
        }
        ssize_t n = pread(fd, buf, chunk, off);
        if (n < 0) die("pread");
        sink += ((unsigned char *)buf)[0];
        atomic_fetch_add(&consumed, (uint64_t)n);
    }
    free(buf);
    return NULL;
}

static void run_fread(void) {
    FILE *f = fopen(path, "rb");
    if (!f) die("fopen");
    size_t bufsz = 1 << 20, destsz = 64 << 20, d = 0;
    char *buf = malloc(bufsz), *dest = malloc(destsz);
    if (!buf || !dest) die("malloc");
    memset(dest, 0, destsz);
    while (!atomic_load(&stop)) {
        drop(fileno(f));
        rewind(f);
        size_t n;
        while (!atomic_load(&stop) && (n = fread(buf, 1, bufsz, f)) > 0) {
            if (d + n > destsz) d = 0;
            memcpy(dest + d, buf, n);
            d += n;
            atomic_fetch_add(&consumed, n);
        }
    }
    sink += dest[1];
    fclose(f);
}

/* Cold: each pass maps the file anew after dropping its pages (mapped
 * pages cannot be dropped, so the mapping goes first). Warm: each pass maps
 * it anew too, and the previous mapping is unmapped only after the next one
 * was read, as a loader that maps a model once keeps it. */
static void run_mmap(void) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) die("open");
    const uint64_t *prev = NULL;
    while (!atomic_load(&stop)) {
        drop(fd);
        const uint64_t *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) die("mmap");
        madvise((void *)p, size, MADV_SEQUENTIAL);
        uint64_t sum = 0;
        size_t words = size / 8, step = (1 << 20) / 8;
        for (size_t i = 0; i < words && !atomic_load(&stop); i += step) {
            size_t end = i + step < words ? i + step : words;
            for (size_t j = i; j < end; j++) sum += p[j];
            atomic_fetch_add(&consumed, (end - i) * 8);
        }
        sink += sum;
        if (prev) munmap((void *)prev, size);
        prev = NULL;
        if (cold)
            munmap((void *)p, size);
        else
            prev = p;
    }
    if (prev) munmap((void *)prev, size);
    close(fd);
}

int main(int argc, char **argv) {
    const char *logpath;
    if (getenv("LOADER_MODE")) {
        mode = getenv("LOADER_MODE");
        path = getenv("LOADER_FILE");
        nthreads = atoi(getenv("LOADER_THREADS"));
        cold = strcmp(getenv("LOADER_CACHE"), "cold") == 0;
        logpath = getenv("LOADER_LOG");
    } else if (argc == 6) {
        mode = argv[1];
        path = argv[2];
        nthreads = atoi(argv[3]);
        cold = strcmp(argv[4], "cold") == 0;
        logpath = argv[5];
    } else {
        fprintf(stderr, "usage: loader MODE FILE THREADS cold|warm LOG\n");
        return 2;
    }
    if (getenv("LOADER_LIB") && !dlopen(getenv("LOADER_LIB"), RTLD_NOW)) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    progress = getenv("LOADER_PROGRESS") != NULL;
    const char *title = getenv("LOADER_TITLE");
    if (title) {
        pid_t child = fork();
        if (child < 0) die("fork");
        if (child > 0) {
            int status;
            if (waitpid(child, &status, 0) < 0) die("waitpid");
            return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
        }
        /* setproctitle: the name, and the title over the argv area. */
        prctl(PR_SET_NAME, title, 0, 0, 0);
        size_t room = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]);
        memset(argv[0], 0, room);
        strncpy(argv[0], title, room);
    }
    struct stat st;
    if (stat(path, &st)) die("stat");
    size = st.st_size;
    samples = malloc(sizeof(uint64_t) * 2 * MAX_SAMPLES);
    if (!samples) die("malloc");
    if (!cold) {
        /* Warm: the whole file in the page cache first. */
        int fd = open(path, O_RDONLY);
        char *b = malloc(1 << 20);
        while (read(fd, b, 1 << 20) > 0) {}
        free(b);
        close(fd);
    }
    pthread_t s, w;
    pthread_create(&w, NULL, waiter, NULL);
    pthread_create(&s, NULL, sampler, NULL);
    started_ns = now_ns();
    if (title)
        printf("ready %d\n", (int)getpid());
    else
        printf("ready\n");
    fflush(stdout);
    if (strcmp(mode, "fread") == 0) {
        run_fread();
    } else if (strcmp(mode, "mmap") == 0) {
        run_mmap();
    } else {
        int flags = O_RDONLY | (strcmp(mode, "direct") == 0 ? O_DIRECT : 0);
        int fd = open(path, flags);
        if (fd < 0) die("open");
        drop(fd);
        pthread_barrier_init(&pass_barrier, NULL, nthreads);
        pthread_t t[64];
        for (int i = 0; i < nthreads && i < 64; i++)
            pthread_create(&t[i], NULL, pread_worker, (void *)(intptr_t)fd);
        for (int i = 0; i < nthreads && i < 64; i++) pthread_join(t[i], NULL);
        close(fd);
    }
    pthread_join(s, NULL);
    FILE *log = fopen(logpath, "w");
    if (!log) die("log");
    for (size_t i = 0; i + 1 < nsamples; i += 2)
        fprintf(log, "%llu %llu\n", (unsigned long long)samples[i], (unsigned long long)samples[i + 1]);
    fclose(log);
    return 0;
}
