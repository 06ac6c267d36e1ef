"""Planning: the request, the plan of a rescale, operator-state redistribution and the plan of a migration."""
