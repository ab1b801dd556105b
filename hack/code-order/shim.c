// LD_PRELOAD for hack/code-order.sh: records which pages of the executable's
// code the process touches, exactly. Before the program runs, its code mapping
// is replaced by an empty anonymous one registered with userfaultfd; a thread
// fills each page from the file on its first touch and logs the page's file
// offset to $CODE_ORDER_DIR/pages-<pid>.txt. (A file mapping cannot be used:
// the kernel maps up to 64 KiB around each fault from the page cache, and reads
// ahead, so its resident pages are far more than the touched ones.)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int uffd = -1, exe_fd = -1, log_fd = -1;
static unsigned long text_start, text_off;
static char page[4096];

static void *serve(void *unused) {
  (void)unused;
  for (;;) {
    struct uffd_msg msg;
    ssize_t n = read(uffd, &msg, sizeof msg);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof msg) return NULL;
    if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
    unsigned long addr = msg.arg.pagefault.address & ~4095UL;
    unsigned long off = text_off + (addr - text_start);
    memset(page, 0, sizeof page);
    if (pread(exe_fd, page, sizeof page, (off_t)off) < 0) abort();
    struct uffdio_copy copy = {.dst = addr, .src = (unsigned long)page, .len = 4096, .mode = 0};
    if (ioctl(uffd, UFFDIO_COPY, &copy) < 0 && errno != EEXIST) abort();
    char line[32];
    int len = snprintf(line, sizeof line, "%lx\n", off);
    if (write(log_fd, line, (size_t)len) < 0) abort();
  }
}

static void fail(const char *what) {
  fprintf(stderr, "code-order shim: %s: %s\n", what, strerror(errno));
  _exit(97);
}

__attribute__((constructor)) static void record_touched_code(void) {
  const char *dir = getenv("CODE_ORDER_DIR");
  if (!dir) return;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) fail("readlink /proc/self/exe");
  exe[n] = 0;
  FILE *maps = fopen("/proc/self/maps", "r");
  if (!maps) fail("/proc/self/maps");
  char line[8192];
  unsigned long end = 0;
  while (fgets(line, sizeof line, maps)) {
    unsigned long s, e, off;
    char perms[8], path[4096] = "";
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &s, &e, perms, &off, path) >= 4 &&
        strcmp(path, exe) == 0 && strcmp(perms, "r-xp") == 0) {
      text_start = s, end = e, text_off = off;
    }
  }
  fclose(maps);
  if (!end) fail("no r-xp mapping of the executable");
  char log_path[4096];
  snprintf(log_path, sizeof log_path, "%s/pages-%d.txt", dir, (int)getpid());
  log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  exe_fd = open(exe, O_RDONLY | O_CLOEXEC);
  if (log_fd < 0 || exe_fd < 0) fail("open");
  uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
  if (uffd < 0) fail("userfaultfd");
  struct uffdio_api api = {.api = UFFD_API, .features = 0};
  if (ioctl(uffd, UFFDIO_API, &api) < 0) fail("UFFDIO_API");
  if (mmap((void *)text_start, end - text_start, PROT_READ | PROT_EXEC,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
    fail("mmap");
  struct uffdio_register reg = {.range = {.start = text_start, .len = end - text_start},
                                .mode = UFFDIO_REGISTER_MODE_MISSING};
  if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0) fail("UFFDIO_REGISTER");
  pthread_t t;
  if (pthread_create(&t, NULL, serve, NULL) != 0) fail("pthread_create");
}
