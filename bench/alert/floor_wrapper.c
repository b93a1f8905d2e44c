/* The least any wrapper can do: spawn the command, wait, return its status. Its overhead
   over the bare command is the machine's price of one extra process, a floor against
   which gpualert's own overhead is read. */
#include <spawn.h>
#include <sys/wait.h>

extern char** environ;

int main(int argc, char** argv) {
  (void)argc;
  pid_t pid;
  if (posix_spawn(&pid, argv[1], 0, 0, argv + 1, environ) != 0) return 127;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
