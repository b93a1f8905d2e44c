/* Test helper: counts signal deliveries by appending a line per delivery to COUNT from the
 * handler itself ("int" for SIGINT, "term" for SIGTERM; no deferred flag that would merge two
 * deliveries), touches READY when set up and exits when STOP appears.
 *
 *   count_sigint COUNT READY STOP
 *   count_sigint --detach WITNESS COUNT READY STOP
 *
 * --detach leaves the terminal's foreground process group, so a Ctrl-C typed at the terminal
 * can reach this process only if someone forwards it; a child left behind in the foreground
 * group (the witness) appends "int" to WITNESS when the terminal's SIGINT arrives. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char* count_path;

static void append(const char* line) {
  int fd = open(count_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    (void)!write(fd, line, strlen(line));
    close(fd);
  }
}

static void on_int(int sig) {
  (void)sig;
  append("int\n");
}

static void on_term(int sig) {
  (void)sig;
  append("term\n");
}

static void wait_for(const char* path) {
  const struct timespec tick = {0, 20 * 1000 * 1000};
  while (access(path, F_OK) != 0) nanosleep(&tick, NULL);
}

int main(int argc, char** argv) {
  const int detach = argc == 6 && strcmp(argv[1], "--detach") == 0;
  if (argc != 4 && !detach) return 2;
  const char* witness = detach ? argv[2] : NULL;
  char** a = argv + (detach ? 3 : 1);
  count_path = a[0];
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_int;
  sigaction(SIGINT, &sa, NULL);
  pid_t child = -1;
  if (detach) {
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    /* SIGINT blocked until each process has its file and group, so none is miscounted. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    child = fork();
    if (child < 0) return 3;
    if (child == 0) {
      count_path = witness;
      sigprocmask(SIG_SETMASK, &old, NULL);
      wait_for(a[2]);
      _exit(0);
    }
    if (setpgid(0, 0) != 0) return 4;
    sigprocmask(SIG_SETMASK, &old, NULL);
  }
  close(open(a[1], O_WRONLY | O_CREAT, 0644));
  wait_for(a[2]);
  if (child > 0) waitpid(child, NULL, 0);
  return 0;
}
