/* schema.c: being written */
