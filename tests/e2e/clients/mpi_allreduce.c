/* One MPI rank: all-reduce rank + 1 and write RESULTS/<rank>.json with the host it ran on. */
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size;
    long mine, sum;
    char host[256], path[4096];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    mine = rank + 1;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    gethostname(host, sizeof host);
    snprintf(path, sizeof path, "%s/%d.json", argc > 1 ? argv[1] : ".", rank);
    FILE *out = fopen(path, "w");
    if (out == NULL) return 2;
    fprintf(out, "{\"rank\": %d, \"size\": %d, \"sum\": %ld, \"host\": \"%s\"}\n", rank, size, sum, host);
    fclose(out);
    MPI_Finalize();
    return 0;
}
