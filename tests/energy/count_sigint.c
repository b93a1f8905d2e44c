/* Test helper: counts every SIGINT delivery by appending a line to argv[1] from the handler
 * itself (no deferred flag that would merge two deliveries), touches argv[2] when ready and
 * exits when argv[3] appears. */
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char* count_path;

static void on_int(int sig) {
  (void)sig;
  int fd = open(count_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    (void)!write(fd, "int\n", 4);
    close(fd);
  }
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  count_path = argv[1];
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_int;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  close(open(argv[2], O_WRONLY | O_CREAT, 0644));
  const struct timespec tick = {0, 20 * 1000 * 1000};
  while (access(argv[3], F_OK) != 0) nanosleep(&tick, NULL);
  return 0;
}
