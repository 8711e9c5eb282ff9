/* A parent that forks a child and blocks in waitpid until the child has exited: the child
 * maps, touches and unmaps memory, then exits. (python/tests/test_record.py: the parent's
 * fork record must come before the child's events in the recording.) */
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    pid_t child = fork();
    if (child < 0)
        return 2;
    if (child == 0) {
        for (int i = 0; i < 20; i++) {
            char *p = mmap(NULL, 16 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED)
                _exit(3);
            for (int j = 0; j < 16; j++)
                p[j * 4096] = (char)j;
            munmap(p, 16 * 4096);
        }
        _exit(0);
    }
    int status;
    if (waitpid(child, &status, 0) != child)
        return 4;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
