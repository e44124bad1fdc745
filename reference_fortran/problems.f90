! pompy Fortran oracle: problem set-up (pom2k seamount and box).

subroutine seamount(im, jm, kb, kl1, kl2, hmax, slmax, grav, rhoref, tbias, sbias, &
                    aam, e_atmos, z, zz, dz, dzz, dx, dy, cor, &
                    east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot, &
                    h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, ub, uab, &
                    elb, etb, dt, aam2d, rho, rmean, uabe, uabw, ele, elw, &
                    tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs)
  ! pom2k seamount: a Gaussian seamount in an east-west channel with a
  ! uniform 0.2 m/s inflow, stratified temperature and uniform salinity;
  ! east and west open, north and south closed by the masks.
  implicit none
  integer, intent(in) :: im, jm, kb, kl1, kl2
  real(8), intent(in) :: hmax, slmax, grav, rhoref, tbias, sbias
  real(8), intent(in) :: aam(im,jm,kb), e_atmos(im,jm)
  real(8), intent(inout) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(inout) :: dx(im,jm), dy(im,jm), cor(im,jm)
  real(8), intent(inout) :: east_c(im,jm), north_c(im,jm), east_e(im,jm), north_e(im,jm)
  real(8), intent(inout) :: east_u(im,jm), north_u(im,jm), east_v(im,jm), north_v(im,jm)
  real(8), intent(inout) :: rot(im,jm), h(im,jm), art(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(inout) :: fsm(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(inout) :: tb(im,jm,kb), sb(im,jm,kb), tclim(im,jm,kb), sclim(im,jm,kb)
  real(8), intent(inout) :: ub(im,jm,kb), uab(im,jm), elb(im,jm), etb(im,jm), dt(im,jm)
  real(8), intent(inout) :: aam2d(im,jm), rho(im,jm,kb), rmean(im,jm,kb)
  real(8), intent(inout) :: uabe(jm), uabw(jm), ele(jm), elw(jm)
  real(8), intent(inout) :: tbe(jm,kb), tbw(jm,kb), sbe(jm,kb), sbw(jm,kb)
  real(8), intent(inout) :: tbn(im,kb), tbs(im,kb), sbn(im,kb), sbs(im,kb)
  real(8) :: delh, delx, elejmid, elwjmid, ra, vel, pi
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  pi = atan(1.d0)*4.d0
  delh = 0.9d0          ! > 1 gives an island instead of a seamount
  delx = 8000.d0        ! grid size
  ra = 25000.d0         ! radius of the seamount
  vel = 0.2d0           ! inflow velocity

  call depth(kb, kl1, kl2, z, zz, dz, dzz)
  ! variable grid, finest in the middle
  do j = 1, jm
    do i = 1, im
      dx(i,j) = delx - delx*sin(pi*dble(i)/dble(im))/2.d0
      dy(i,j) = delx - delx*sin(pi*dble(j)/dble(jm))/2.d0
      cor(i,j) = 1.d-4
    end do
  end do
  call grid_coordinates(im, jm, dx, dy, east_c, north_c, east_e, north_e, &
                        east_u, north_u, east_v, north_v, rot)
  do j = 1, jm
    do i = 1, im
      ! exp(-r2) (not 1/exp(r2)): with gfortran -O3's vectorised exp this
      ! reproduces the golden pom2k depths bit for bit
      h(i,j) = hmax*(1.d0 - delh*exp(-((east_c(i,j) - east_c((im+1)/2,j))**2 &
                                      + (north_c(i,j) - north_c(i,(jm+1)/2))**2)/ra**2))
      if (h(i,j) < 1.d0) h(i,j) = 1.d0
    end do
  end do
  ! close the north and south boundaries to form a channel
  do i = 1, im
    h(i,1) = 1.d0
    h(i,jm) = 1.d0
  end do
  call areas_masks(im, jm, dx, dy, h, art, aru, arv, fsm, dum, dvm)
  if (slmax < 1.d0) call slpmax(im, jm, slmax, fsm, h)

  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tb(i,j,k) = 5.d0 + 15.d0*exp(zz(k)*h(i,j)/1000.d0) - tbias
        sb(i,j,k) = 35.d0 - sbias
        tclim(i,j,k) = tb(i,j,k)
        sclim(i,j,k) = sb(i,j,k)
        ub(i,j,k) = vel*dum(i,j)
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      uab(i,j) = vel*dum(i,j)
    end do
  end do
  do j = 1, jm
    do i = 1, im
      elb(i,j) = -e_atmos(i,j)
      etb(i,j) = -e_atmos(i,j)
      dt(i,j) = h(i,j) - e_atmos(i,j)
      aam2d(i,j) = aam(i,j,1)
    end do
  end do
  ! horizontally averaged density: the initial density depends on z
  ! only, so rmean is the initial density itself
  call dens(im, jm, kb, grav, rhoref, tbias, sbias, zz, h, fsm, sb, tb, rho)
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        rmean(i,j,k) = rho(i,j,k)
      end do
    end do
  end do
  ! open east and west boundaries; geostrophically balanced elevations
  do j = 2, jmm1
    uabw(j) = uab(2,j)
    uabe(j) = uab(imm1,j)
    ele(j) = ele(j-1) - cor(imm1,j)*uab(imm1,j)/grav*dy(imm1,j-1)
    elw(j) = elw(j-1) - cor(2,j)*uab(2,j)/grav*dy(2,j-1)
  end do
  ! zero in the middle of the channel
  elejmid = ele(jmm1/2)
  elwjmid = elw(jmm1/2)
  do j = 2, jmm1
    ele(j) = (ele(j) - elejmid)*fsm(im,j)
    elw(j) = (elw(j) - elwjmid)*fsm(2,j)
  end do
  ! lateral thermodynamic boundary values: the initial state
  do k = 1, kbm1
    do j = 1, jm
      tbe(j,k) = tb(im,j,k)
      tbw(j,k) = tb(1,j,k)
      sbe(j,k) = sb(im,j,k)
      sbw(j,k) = sb(1,j,k)
    end do
    do i = 1, im
      tbn(i,k) = tb(i,jm,k)
      tbs(i,k) = tb(i,1,k)
      sbn(i,k) = sb(i,jm,k)
      sbs(i,k) = sb(i,1,k)
    end do
  end do
end subroutine seamount


subroutine grid_coordinates(im, jm, dx, dy, east_c, north_c, east_e, north_e, &
                            east_u, north_u, east_v, north_v, rot)
  ! Cell corner (c), centre (e), u- and v-point coordinates from dx, dy,
  ! as pom2k's seamount and box write them for post-processing only
  ! (nothing in the model reads them). The last row and column are
  ! extrapolated by one spacing; these rules reproduce the golden pom2k
  ! output to the last bit at the centres and within 2e-16 elsewhere.
  implicit none
  integer, intent(in) :: im, jm
  real(8), intent(in) :: dx(im,jm), dy(im,jm)
  real(8), intent(inout) :: east_c(im,jm), north_c(im,jm), east_e(im,jm), north_e(im,jm)
  real(8), intent(inout) :: east_u(im,jm), north_u(im,jm), east_v(im,jm), north_v(im,jm)
  real(8), intent(inout) :: rot(im,jm)
  integer :: i, j

  do j = 1, jm
    east_c(1,j) = 0.d0
    do i = 2, im
      east_c(i,j) = east_c(i-1,j) + dx(i-1,j)
    end do
  end do
  do i = 1, im
    north_c(i,1) = 0.d0
    do j = 2, jm
      north_c(i,j) = north_c(i,j-1) + dy(i,j-1)
    end do
  end do
  do j = 1, jm-1
    do i = 1, im-1
      east_e(i,j) = (east_c(i,j) + east_c(i+1,j) + east_c(i,j+1) + east_c(i+1,j+1))/4.d0
      north_e(i,j) = (north_c(i,j) + north_c(i+1,j) + north_c(i,j+1) + north_c(i+1,j+1))/4.d0
    end do
  end do
  do i = 1, im-1
    east_e(i,jm) = east_e(i,jm-1) + (east_c(i,jm) - east_c(i,jm-1))
    north_e(i,jm) = north_e(i,jm-1) + (north_c(i,jm) - north_c(i,jm-1))
  end do
  do j = 1, jm
    east_e(im,j) = east_e(im-1,j) + (east_c(im,j) - east_c(im-1,j))
    north_e(im,j) = north_e(im-1,j) + (north_c(im,j) - north_c(im-1,j))
  end do
  ! the corner: the mean of the linear extrapolations along i and along j
  east_e(im,jm) = ((2.d0*east_e(im-1,jm) - east_e(im-2,jm)) &
                   + (2.d0*east_e(im,jm-1) - east_e(im,jm-2)))/2.d0
  north_e(im,jm) = ((2.d0*north_e(im-1,jm) - north_e(im-2,jm)) &
                    + (2.d0*north_e(im,jm-1) - north_e(im,jm-2)))/2.d0
  do j = 1, jm
    do i = 1, im
      if (j < jm) then
        east_u(i,j) = .5d0*(east_c(i,j) + east_c(i,j+1))
        north_u(i,j) = .5d0*(north_c(i,j) + north_c(i,j+1))
      end if
      if (i < im) then
        east_v(i,j) = .5d0*(east_c(i,j) + east_c(i+1,j))
        north_v(i,j) = .5d0*(north_c(i,j) + north_c(i+1,j))
      end if
      rot(i,j) = 0.d0
    end do
  end do
  do i = 1, im
    east_u(i,jm) = east_u(i,jm-1) + (east_c(i,jm) - east_c(i,jm-1))
    north_u(i,jm) = north_u(i,jm-1) + (north_c(i,jm) - north_c(i,jm-1))
  end do
  do j = 1, jm
    east_v(im,j) = east_v(im-1,j) + (east_c(im,j) - east_c(im-1,j))
    north_v(im,j) = north_v(im-1,j) + (north_c(im,j) - north_c(im-1,j))
  end do
end subroutine grid_coordinates


subroutine box(im, jm, kb, kl1, kl2, grav, rhoref, tbias, sbias, &
               aam, z, zz, dz, dzz, dx, dy, cor, &
               east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot, &
               h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, &
               elb, etb, dt, aam2d, rho, rmean, e_atmos, vfluxf)
  ! pom2k box: a flat-bottomed basin closed by walls on all four sides,
  ! uniform temperature and salinity, a steady surface freshwater inflow
  ! vfluxf (negative: into the ocean, pom2k's sign) and a fixed tilt of
  ! the atmospheric pressure e_atmos, balanced initially by the surface
  ! elevation (inverse barometer). The inflow carries the basin's T and
  ! S (see surface_forcing), so T and S stay uniform while the surface
  ! rises at -vfluxf.
  implicit none
  integer, intent(in) :: im, jm, kb, kl1, kl2
  real(8), intent(in) :: grav, rhoref, tbias, sbias, aam(im,jm,kb)
  real(8), intent(inout) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(inout) :: dx(im,jm), dy(im,jm), cor(im,jm)
  real(8), intent(inout) :: east_c(im,jm), north_c(im,jm), east_e(im,jm), north_e(im,jm)
  real(8), intent(inout) :: east_u(im,jm), north_u(im,jm), east_v(im,jm), north_v(im,jm)
  real(8), intent(inout) :: rot(im,jm), h(im,jm), art(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(inout) :: fsm(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(inout) :: tb(im,jm,kb), sb(im,jm,kb), tclim(im,jm,kb), sclim(im,jm,kb)
  real(8), intent(inout) :: elb(im,jm), etb(im,jm), dt(im,jm), aam2d(im,jm)
  real(8), intent(inout) :: rho(im,jm,kb), rmean(im,jm,kb), e_atmos(im,jm), vfluxf(im,jm)
  real(8) :: depth_box, delx, tilt, vflux_box
  integer :: i, j, k, kbm1

  kbm1 = kb - 1
  depth_box = 4500.d0    ! water depth
  delx = 8000.d0         ! grid size
  tilt = 1.d-6           ! atmospheric pressure tilt, m of water per m east
  vflux_box = -1.d-5     ! freshwater inflow through the surface, m/s

  call depth(kb, kl1, kl2, z, zz, dz, dzz)
  do j = 1, jm
    do i = 1, im
      dx(i,j) = delx
      dy(i,j) = delx
      cor(i,j) = 1.d-4
    end do
  end do
  call grid_coordinates(im, jm, dx, dy, east_c, north_c, east_e, north_e, &
                        east_u, north_u, east_v, north_v, rot)
  do j = 1, jm
    do i = 1, im
      h(i,j) = depth_box
    end do
  end do
  ! walls on all four sides
  do i = 1, im
    h(i,1) = 1.d0
    h(i,jm) = 1.d0
  end do
  do j = 1, jm
    h(1,j) = 1.d0
    h(im,j) = 1.d0
  end do
  call areas_masks(im, jm, dx, dy, h, art, aru, arv, fsm, dum, dvm)

  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tb(i,j,k) = 20.d0 - tbias
        sb(i,j,k) = 35.d0 - sbias
        tclim(i,j,k) = tb(i,j,k)
        sclim(i,j,k) = sb(i,j,k)
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      e_atmos(i,j) = tilt*(east_e(i,j) - east_e((im+1)/2,j))*fsm(i,j)
      vfluxf(i,j) = vflux_box*fsm(i,j)
    end do
  end do
  do j = 1, jm
    do i = 1, im
      elb(i,j) = -e_atmos(i,j)
      etb(i,j) = -e_atmos(i,j)
      dt(i,j) = h(i,j) - e_atmos(i,j)
      aam2d(i,j) = aam(i,j,1)
    end do
  end do
  call dens(im, jm, kb, grav, rhoref, tbias, sbias, zz, h, fsm, sb, tb, rho)
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        rmean(i,j,k) = rho(i,j,k)
      end do
    end do
  end do
end subroutine box


subroutine file2ic(im, jm, kb, kl1, kl2, slmax, grav, rhoref, tbias, sbias, &
                   aam, e_atmos, t, s, u, v, ua, va, el, dx, dy, z, zz, dz, dzz, &
                   east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot, &
                   h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, ub, vb, uab, vab, &
                   elb, etb, dt, aam2d, rho, tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs)
  ! pom2k file2ic: the grid and initial state read from a file (pompy's IC
  ! file, see pompy/icfile.py), finished as seamount finishes its own.
  ! On entry the state holds the file's arrays: dx, dy, h, cor; t, s,
  ! tclim, sclim and the lateral boundary values tbe ... sbs as actual
  ! temperatures and salinities; the velocities u, v, ua, va; the
  ! elevation el; rmean (not touched here). This sets the sigma levels,
  ! the post-processing coordinates, land h < 1 to h = 1, areas and masks,
  ! slpmax if slmax < 1; tb = t - tbias, sb = s - sbias and tclim, sclim,
  ! tbe ... sbs less the biases; ub, vb, uab, vab the velocities masked by
  ! dum, dvm; elb, etb the elevation masked by fsm less e_atmos; dt,
  ! aam2d and rho. The 3-D fields are set for k = 1..kbm1, as seamount.
  implicit none
  integer, intent(in) :: im, jm, kb, kl1, kl2
  real(8), intent(in) :: slmax, grav, rhoref, tbias, sbias
  real(8), intent(in) :: aam(im,jm,kb), e_atmos(im,jm)
  real(8), intent(in) :: t(im,jm,kb), s(im,jm,kb), u(im,jm,kb), v(im,jm,kb)
  real(8), intent(in) :: ua(im,jm), va(im,jm), el(im,jm), dx(im,jm), dy(im,jm)
  real(8), intent(inout) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(inout) :: east_c(im,jm), north_c(im,jm), east_e(im,jm), north_e(im,jm)
  real(8), intent(inout) :: east_u(im,jm), north_u(im,jm), east_v(im,jm), north_v(im,jm)
  real(8), intent(inout) :: rot(im,jm), h(im,jm), art(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(inout) :: fsm(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(inout) :: tb(im,jm,kb), sb(im,jm,kb), tclim(im,jm,kb), sclim(im,jm,kb)
  real(8), intent(inout) :: ub(im,jm,kb), vb(im,jm,kb), uab(im,jm), vab(im,jm)
  real(8), intent(inout) :: elb(im,jm), etb(im,jm), dt(im,jm), aam2d(im,jm), rho(im,jm,kb)
  real(8), intent(inout) :: tbe(jm,kb), tbw(jm,kb), sbe(jm,kb), sbw(jm,kb)
  real(8), intent(inout) :: tbn(im,kb), tbs(im,kb), sbn(im,kb), sbs(im,kb)
  integer :: i, j, k, kbm1

  kbm1 = kb - 1

  call depth(kb, kl1, kl2, z, zz, dz, dzz)
  call grid_coordinates(im, jm, dx, dy, east_c, north_c, east_e, north_e, &
                        east_u, north_u, east_v, north_v, rot)
  do j = 1, jm
    do i = 1, im
      if (h(i,j) < 1.d0) h(i,j) = 1.d0
    end do
  end do
  call areas_masks(im, jm, dx, dy, h, art, aru, arv, fsm, dum, dvm)
  if (slmax < 1.d0) call slpmax(im, jm, slmax, fsm, h)

  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tb(i,j,k) = t(i,j,k) - tbias
        sb(i,j,k) = s(i,j,k) - sbias
        tclim(i,j,k) = tclim(i,j,k) - tbias
        sclim(i,j,k) = sclim(i,j,k) - sbias
        ub(i,j,k) = u(i,j,k)*dum(i,j)
        vb(i,j,k) = v(i,j,k)*dvm(i,j)
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      uab(i,j) = ua(i,j)*dum(i,j)
      vab(i,j) = va(i,j)*dvm(i,j)
      elb(i,j) = el(i,j)*fsm(i,j) - e_atmos(i,j)
      etb(i,j) = elb(i,j)
      dt(i,j) = h(i,j) + etb(i,j)
      aam2d(i,j) = aam(i,j,1)
    end do
  end do
  call dens(im, jm, kb, grav, rhoref, tbias, sbias, zz, h, fsm, sb, tb, rho)
  ! lateral boundary T and S, less the biases
  do k = 1, kbm1
    do j = 1, jm
      tbe(j,k) = tbe(j,k) - tbias
      tbw(j,k) = tbw(j,k) - tbias
      sbe(j,k) = sbe(j,k) - sbias
      sbw(j,k) = sbw(j,k) - sbias
    end do
    do i = 1, im
      tbn(i,k) = tbn(i,k) - tbias
      tbs(i,k) = tbs(i,k) - tbias
      sbn(i,k) = sbn(i,k) - sbias
      sbs(i,k) = sbs(i,k) - sbias
    end do
  end do
end subroutine file2ic
