/* The local cluster's pause program: the process of each pod's sandbox
 * container. It holds the pod's namespaces, reaps the zombies of processes
 * that share its PID namespace, and exits 0 on SIGTERM or SIGINT.
 * Built statically (gcc -static) by hack/images/build.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("vllm-local pause");
    return 0;
  }
  if (getpid() != 1)
    fprintf(stderr, "pause: warning: not PID 1, zombies of the namespace are not mine\n");
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;)
    pause();
}
