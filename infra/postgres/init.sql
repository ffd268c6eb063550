-- Each service owns one database (used by docker-compose; ./onto up creates the same).
CREATE DATABASE onto_control;
CREATE DATABASE onto_data;
CREATE DATABASE onto_intelligence;
