/* filter.c: being written */
